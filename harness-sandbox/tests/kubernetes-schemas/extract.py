#!/usr/bin/env python3
"""Makes the standalone schemas in this folder from kubernetes-validate's wheel.

kubernetes-validate (PyPI, Apache-2.0) ships Kubernetes' OpenAPI definitions as JSON Schema
(draft 2020-12), one "local-strict" folder per version: each kind's file refers to a shared
1.8 MB `_definitions.json`. This copies a kind's file with only the definitions it reaches,
its references rewritten to `#/$defs/...`, so that a test needs one small file per kind.

    pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv
    python3 extract.py /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl v1.33.0
    python3 extract.py /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl v1.37.0

Each version's files go to a folder of its name.
"""
import json
import pathlib
import sys
import zipfile

KINDS = ["pod-v1.json", "networkpolicy-networking-v1.json"]
PREFIX = "/api/_definitions.json#/$defs/"


def main(wheel, version):
    folder = f"kubernetes_validate/kubernetes-json-schema/{version}-local-strict/"
    here = pathlib.Path(__file__).parent / version
    here.mkdir(exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        defs = json.loads(z.read(folder + "_definitions.json"))["$defs"]
        for kind in KINDS:
            schema = json.loads(z.read(folder + kind))
            needed = {}
            pending = [schema]
            while pending:
                node = pending.pop()
                if isinstance(node, dict):
                    ref = node.get("$ref")
                    name = None
                    if isinstance(ref, str):
                        for prefix in (PREFIX, "#/$defs/"):
                            if ref.startswith(prefix):
                                name = ref[len(prefix):]
                    if name is not None:
                        node["$ref"] = "#/$defs/" + name
                        if name not in needed:
                            needed[name] = json.loads(json.dumps(defs[name]))
                            pending.append(needed[name])
                    pending.extend(node.values())
                elif isinstance(node, list):
                    pending.extend(node)
            schema["$defs"] = dict(sorted(needed.items()))
            schema["$comment"] = (
                f"Kubernetes {version} `{kind}` (local-strict) from kubernetes-validate "
                "(PyPI, Apache-2.0), made standalone by extract.py"
            )
            (here / kind).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
