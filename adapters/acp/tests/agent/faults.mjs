// A small ACP agent of our own for fault tests (plain Node.js, no dependencies): it speaks
// newline-delimited JSON-RPC on stdio and misbehaves as its first argument says.
//   hang       answers initialize and session/new, then never answers session/prompt and
//              ignores session/cancel
//   crash      streams one chunk, writes to stderr, then exits with status 3 mid-turn
//   malformed  streams one chunk, then writes a line that is not JSON
//   child      spawns a child process (in the same process group) that outlives the turn,
//              then hangs like `hang`
//   fs         asks for a file inside the workspace, one outside it, a terminal, a write
//              inside and a write escaping with `..`, then reports the answers as message
//              chunks and ends the turn
//   version    answers initialize with protocol version 999
//   text, reasoning, tool, tool_error, approval, auth
//              well-behaved turns for the conformance suite: one message chunk, one thought
//              chunk, one tool call that completes / fails, one permission request, or a
//              prompt that fails with auth_required (-32000)
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

const mode = process.argv[2];
if (mode === "hang" || mode === "child") process.on("SIGTERM", () => {}); // ignore polite stops
let nextId = 1000;
const waiting = new Map();
const send = (m) => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...m }) + "\n");
const request = (method, params) =>
  new Promise((resolve) => {
    const id = nextId++;
    waiting.set(id, resolve);
    send({ id, method, params });
  });
const chunk = (sessionId, text) =>
  send({
    method: "session/update",
    params: { sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } } },
  });

createInterface({ input: process.stdin }).on("line", async (line) => {
  const m = JSON.parse(line);
  if (m.method === undefined) {
    waiting.get(m.id)?.(m);
    return;
  }
  const p = m.params;
  switch (m.method) {
    case "initialize":
      send({
        id: m.id,
        result: { protocolVersion: mode === "version" ? 999 : 1, agentCapabilities: { loadSession: false } },
      });
      break;
    case "session/new":
      send({ id: m.id, result: { sessionId: "s1" } });
      break;
    case "session/prompt":
      if (mode === "crash") {
        chunk(p.sessionId, "about to crash");
        process.stderr.write(`fatal: secret-token-123 exploded, Bearer abcdefghijklmnop0123 ${process.argv[4] ?? ""}\n`);
        setTimeout(() => process.exit(3), 50);
      } else if (mode === "malformed") {
        chunk(p.sessionId, "about to babble");
        process.stdout.write("this is not json\n");
      } else if (mode === "child") {
        spawn(
          process.execPath,
          ["-e", "process.on('SIGTERM', () => {}); setInterval(() => {}, 1000)", "--", process.argv[3] ?? ""],
          { stdio: "ignore" },
        );
        chunk(p.sessionId, "spawned a child");
      } else if (mode === "fs") {
        const inside = await request("fs/read_text_file", { sessionId: p.sessionId, path: `${process.cwd()}/inside.txt` });
        const outside = await request("fs/read_text_file", { sessionId: p.sessionId, path: "/etc/passwd" });
        const term = await request("terminal/create", { sessionId: p.sessionId, command: "ls" });
        chunk(p.sessionId, `inside:${inside.result?.content ?? "error"};`);
        chunk(p.sessionId, `outside:${outside.error ? "declined" : "served"};`);
        const write = await request("fs/write_text_file", { sessionId: p.sessionId, path: `${process.cwd()}/new.txt`, content: "written" });
        const escape = await request("fs/write_text_file", { sessionId: p.sessionId, path: `${process.cwd()}/../escape.txt`, content: "x" });
        chunk(p.sessionId, `terminal:${term.error ? "declined" : "served"};`);
        chunk(p.sessionId, `write:${write.error ? "declined" : "served"};`);
        chunk(p.sessionId, `escape:${escape.error ? "declined" : "served"}`);
        send({ id: m.id, result: { stopReason: "end_turn" } });
      } else if (mode === "text") {
        chunk(p.sessionId, "hello");
        send({ id: m.id, result: { stopReason: "end_turn" } });
      } else if (mode === "reasoning") {
        send({
          method: "session/update",
          params: { sessionId: p.sessionId, update: { sessionUpdate: "agent_thought_chunk", content: { type: "text", text: "hmm" } } },
        });
        send({ id: m.id, result: { stopReason: "end_turn" } });
      } else if (mode === "tool" || mode === "tool_error") {
        const update = (u) => send({ method: "session/update", params: { sessionId: p.sessionId, update: u } });
        update({ sessionUpdate: "tool_call", toolCallId: "t1", title: "read", kind: "read", status: "pending", rawInput: { a: 1 } });
        update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: mode === "tool" ? "completed" : "failed", rawOutput: { ok: mode === "tool" } });
        send({ id: m.id, result: { stopReason: "end_turn" } });
      } else if (mode === "approval") {
        const update = (u) => send({ method: "session/update", params: { sessionId: p.sessionId, update: u } });
        update({ sessionUpdate: "tool_call", toolCallId: "t1", title: "write", kind: "edit", status: "pending", rawInput: { a: 1 } });
        const answer = await request("session/request_permission", {
          sessionId: p.sessionId,
          toolCall: { toolCallId: "t1", title: "write", rawInput: { a: 1 } },
          options: [
            { kind: "allow_once", name: "Allow", optionId: "yes" },
            { kind: "reject_once", name: "Reject", optionId: "no" },
          ],
        });
        if (answer.result?.outcome?.optionId === "yes") {
          update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "completed", rawOutput: { done: true } });
        }
        send({ id: m.id, result: { stopReason: "end_turn" } });
      } else if (mode === "auth") {
        process.stderr.write(`diagnostic: ${process.argv[4] ?? ""}\n`);
        send({ id: m.id, error: { code: -32000, message: "Authentication required" } });
      } else {
        chunk(p.sessionId, "thinking forever");
      }
      break;
    default:
      if (m.id !== undefined) send({ id: m.id, error: { code: -32601, message: "not found" } });
  }
});
