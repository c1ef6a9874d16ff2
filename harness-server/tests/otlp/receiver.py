"""A minimal OTLP/HTTP trace receiver for harness-server's tests.

Listens on 127.0.0.1 (port 0: the kernel picks one), prints `listening <port>` on stdout,
and for each `POST /v1/traces` (Content-Type application/x-protobuf) decodes the
ExportTraceServiceRequest with the official bindings (opentelemetry-proto) and appends one
JSON line per span to the file given as the first argument:

    {"service": ..., "name": ..., "trace_id": hex, "span_id": hex, "parent_span_id": hex or "",
     "attributes": {key: value as a string}}

It answers an empty ExportTraceServiceResponse (200), as a collector does; anything it
cannot decode gets 400. It runs until it is killed.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[1]


def value(any_value):
    kind = any_value.WhichOneof("value")
    return "" if kind is None else str(getattr(any_value, kind))


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as e:  # a malformed body: say so, as a collector would
            self.send_error(400, str(e))
            return
        lines = []
        for resource_spans in request.resource_spans:
            attrs = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "service": attrs.get("service.name", ""),
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "attributes": {a.key: value(a.value) for a in span.attributes},
                    }))
        with open(OUT, "a", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in lines))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
