#!/usr/bin/env python3
"""harness serve and LangGraph's own server (`langgraph dev`, in memory), side by side on the
same workload, read by the same client in the same run. Prints, never asserts: the machines
are shared and noisy, so what counts is the ratio of two figures taken moments apart.

The workload: a run that streams N text deltas ("word "), which is the scripted adapter's
`text_repeated("word ", N)` on ours and a one-node graph writing N custom stream chunks on
LangGraph's (graph.py). Three measures, in alternating rounds (ours, theirs, ours, ...):

1. **stream**: start one run and read its server-sent events to the end, counting the
   frames; events per second, start included. Ours: `POST /v1/executions`, then
   `GET /v1/executions/{id}/events`. LangGraph: `POST /runs/stream` with
   `stream_mode: ["custom"]`.
2. **starts**: runs started one after another by one client, each answered once it is
   queued (ours `POST /v1/executions` -> 201, LangGraph `POST /runs` -> the pending run),
   runs of one delta; starts per second.
3. **concurrent**: 10 runs streamed at once, each of N/10 deltas, over one client's pool
   of connections; events per second in all.

The client is httpx on asyncio for both; frames are counted on raw bytes (`data:` lines)
so that the client's own cost per event stays small and equal on both sides.

Usage (from the repository's root; the first run makes a virtual environment under
target/langgraph-venv with requirements.txt's pinned versions, and builds harness in
release):

    python3 harness-server/benches/langgraph/compare.py [--deltas 20000] [--starts 200]
        [--rounds 3] [--harness target/release/harness] [--python target/langgraph-venv/bin/python]
"""

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TOKEN = "bench-token-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_venv(python):
    """The virtual environment with LangGraph's server and httpx, made once."""
    if python:
        return python
    venv = os.path.join(ROOT, "target", "langgraph-venv")
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "-r", os.path.join(HERE, "requirements.txt")],
            check=True,
        )
    return python


def ensure_harness(path):
    if path:
        return path
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "harness-server", "--bin", "harness"],
        cwd=ROOT,
        check=True,
    )
    return os.path.join(ROOT, "target", "release", "harness")


def wait_ok(url, timeout=60):
    import urllib.request

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not answer within {timeout} s")


def start_harness(binary, scratch):
    config = os.path.join(scratch, "harness.toml")
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    with open(config, "w") as f:
        f.write(
            "body_limit = 16777216\n[connections]\nmax = 20000\nmax_per_peer = 20000\n"
            f'[store]\nkind = "memory"\n[[tokens]]\nprincipal = "bench"\nsha256 = "{digest}"\n'
        )
    port = free_port()
    child = subprocess.Popen(
        [binary, "serve", "--config", config, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ok(f"{url}/healthz")
    return child, url


def start_langgraph(python, scratch):
    for name in ("graph.py", "langgraph.json"):
        shutil.copy(os.path.join(HERE, name), scratch)
    port = free_port()
    cli = os.path.join(os.path.dirname(python), "langgraph")
    env = dict(os.environ, LANGSMITH_TRACING="false", LANGCHAIN_TRACING_V2="false")
    child = subprocess.Popen(
        [cli, "dev", "--no-browser", "--no-reload", "--port", str(port)],
        cwd=scratch,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ok(f"{url}/ok")
    return child, url


def script(n):
    return {
        "script": {
            "steps": [
                {"type": "text", "text": "word ", "repeat": n},
                {"type": "complete", "summary": "ok"},
            ]
        }
    }


async def count_frames(response):
    """`data:` lines in an event stream, counted on raw bytes (a line may span chunks)."""
    frames, tail = 0, b""
    async for chunk in response.aiter_raw():
        buffer = tail + chunk
        frames += buffer.count(b"\ndata:")
        tail = buffer[-6:]
        # A frame counted in the tail must not be counted again with the next chunk.
        if tail.count(b"\ndata:"):
            tail = b""
    return frames


class Ours:
    name = "harness"

    def __init__(self, url, httpx):
        self.url = url
        self.headers = {"authorization": f"Bearer {TOKEN}"}
        self.httpx = httpx

    async def start(self, client, n):
        r = await client.post(
            f"{self.url}/v1/executions",
            headers=self.headers,
            json={"adapter": "scripted", "message": "bench", "options": script(n)},
        )
        if r.status_code != 201:
            raise SystemExit(f"harness refused the start: {r.status_code} {r.text}")
        return r.json()["id"]

    async def stream(self, client, n):
        id = await self.start(client, n)
        async with client.stream(
            "GET",
            f"{self.url}/v1/executions/{id}/events",
            headers={**self.headers, "accept": "text/event-stream"},
        ) as r:
            return await count_frames(r)


class Theirs:
    name = "LangGraph"

    def __init__(self, url, httpx):
        self.url = url
        self.httpx = httpx

    async def start(self, client, n):
        r = await client.post(
            f"{self.url}/runs", json={"assistant_id": "bench", "input": {"n": n}}
        )
        if r.status_code != 200:
            raise SystemExit(f"LangGraph refused the run: {r.status_code} {r.text}")
        return r.json()["run_id"]

    async def stream(self, client, n):
        async with client.stream(
            "POST",
            f"{self.url}/runs/stream",
            json={"assistant_id": "bench", "input": {"n": n}, "stream_mode": ["custom"]},
        ) as r:
            return await count_frames(r)


async def measure_stream(server, httpx, n):
    async with httpx.AsyncClient(timeout=None) as client:
        began = time.perf_counter()
        frames = await server.stream(client, n)
        took = time.perf_counter() - began
    if frames < n:
        raise SystemExit(f"{server.name} streamed {frames} frames of {n}")
    return n / took


async def measure_starts(server, httpx, m):
    async with httpx.AsyncClient(timeout=None) as client:
        await server.start(client, 1)  # the connection, opened outside the timing
        began = time.perf_counter()
        for _ in range(m):
            await server.start(client, 1)
        return m / (time.perf_counter() - began)


async def measure_concurrent(server, httpx, n, k=10):
    each = max(1, n // k)
    # One client, its pool holding a connection per run (a client each would time httpx's
    # own set-up, some 20 ms, not the servers).
    limits = httpx.Limits(max_connections=2 * k, max_keepalive_connections=2 * k)
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:
        await asyncio.gather(*(server.start(client, 1) for _ in range(k)))  # open them
        began = time.perf_counter()
        counts = await asyncio.gather(*(server.stream(client, each) for _ in range(k)))
        took = time.perf_counter() - began
    if min(counts) < each:
        raise SystemExit(f"{server.name} streamed {min(counts)} frames of {each}")
    return k * each / took


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=20000)
    parser.add_argument("--starts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--harness", help="a harness binary (default: build it in release)")
    parser.add_argument("--python", help="a Python with requirements.txt installed")
    args = parser.parse_args()

    python = ensure_venv(args.python)
    if not os.environ.get("HARNESS_COMPARE_CHILD"):
        # Run again under the environment that has httpx, with the same arguments.
        os.environ["HARNESS_COMPARE_CHILD"] = "1"
        os.execv(python, [python, __file__, *sys.argv[1:], "--python", python])
    import httpx

    binary = ensure_harness(args.harness)
    scratch = tempfile.mkdtemp(prefix="harness-vs-langgraph-")
    ours_child, ours_url = start_harness(binary, scratch)
    theirs_child, theirs_url = start_langgraph(python, scratch)
    try:
        ours, theirs = Ours(ours_url, httpx), Theirs(theirs_url, httpx)
        # Warm both (imports, first connections, the graph's first compile).
        asyncio.run(measure_stream(ours, httpx, 100))
        asyncio.run(measure_stream(theirs, httpx, 100))
        measures = [
            ("stream: events/s of one run of %d deltas" % args.deltas,
             lambda s: measure_stream(s, httpx, args.deltas)),
            ("starts: runs started/s, one after another (%d)" % args.starts,
             lambda s: measure_starts(s, httpx, args.starts)),
            ("concurrent: events/s of 10 runs of %d deltas at once" % (args.deltas // 10),
             lambda s: measure_concurrent(s, httpx, args.deltas)),
        ]
        print(f"harness serve ({binary}) vs langgraph dev (langgraph-api, in memory), "
              f"{args.rounds} alternating rounds, medians; ratio = harness / LangGraph")
        print(f"{'measure':<58} {'harness':>12} {'LangGraph':>12} {'ratio':>8}  per round")
        for title, run in measures:
            a, b = [], []
            for _ in range(args.rounds):
                a.append(asyncio.run(run(ours)))
                b.append(asyncio.run(run(theirs)))
            ratios = [x / y for x, y in zip(a, b)]
            print(
                f"{title:<58} {statistics.median(a):>12,.0f} {statistics.median(b):>12,.0f} "
                f"{statistics.median(ratios):>8.1f}  "
                + ", ".join(f"{r:.1f}" for r in ratios)
            )
    finally:
        ours_child.kill()
        os.killpg(theirs_child.pid, signal.SIGTERM)
        ours_child.wait()
        theirs_child.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
