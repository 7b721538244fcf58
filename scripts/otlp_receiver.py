#!/usr/bin/env python3
"""A small OTLP/HTTP receiver for the tests: protobuf only, no collector.

    otlp_receiver.py [--port N] [--out FILE]

Listens on 127.0.0.1 (port 0 picks a free one) and prints the bound port
alone on the first line of stdout. Accepts POST /v1/traces and /v1/metrics
with Content-Type application/x-protobuf, decodes the
ExportTraceServiceRequest / ExportMetricsServiceRequest, and writes one JSON
object per line, to FILE or to stdout:

    {"signal": "span", "trace_id": hex, "span_id": hex, "parent_span_id": hex
     or "", "name", "kind": "internal|server|client|producer|consumer",
     "attributes": {...}, "resource": {...}, "scope": name}
    {"signal": "metric", "name", "unit", "kind": "sum|gauge|histogram|...",
     "monotonic", "temporality", "attributes": {...}, "value" (sum, gauge)
     or "count" and "sum" (histograms), "resource": {...}, "scope": name}

The lines of one request are written and flushed together, so a reader that
takes complete lines never sees half a request. Needs the opentelemetry-proto
package (and its protobuf): `scripts/tools otlp-receiver` makes a venv with
both and prints its python.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

PROTOBUF = "application/x-protobuf"

SPAN_KINDS = {
    trace_pb2.Span.SPAN_KIND_UNSPECIFIED: "unspecified",
    trace_pb2.Span.SPAN_KIND_INTERNAL: "internal",
    trace_pb2.Span.SPAN_KIND_SERVER: "server",
    trace_pb2.Span.SPAN_KIND_CLIENT: "client",
    trace_pb2.Span.SPAN_KIND_PRODUCER: "producer",
    trace_pb2.Span.SPAN_KIND_CONSUMER: "consumer",
}

TEMPORALITIES = {0: "unspecified", 1: "delta", 2: "cumulative"}


def any_value(v):
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return attributes(v.kvlist_value.values)
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def attributes(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def span_lines(request):
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for span in ss.spans:
                yield {
                    "signal": "span",
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": SPAN_KINDS.get(span.kind, str(span.kind)),
                    "attributes": attributes(span.attributes),
                    "resource": resource,
                    "scope": ss.scope.name,
                }


def number(point):
    which = point.WhichOneof("value")
    return getattr(point, which) if which else None


def metric_lines(request):
    for rm in request.resource_metrics:
        resource = attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                if kind is None:
                    continue
                data = getattr(metric, kind)
                base = {
                    "signal": "metric",
                    "name": metric.name,
                    "unit": metric.unit,
                    "kind": kind,
                    "resource": resource,
                    "scope": sm.scope.name,
                }
                if kind == "sum":
                    base["monotonic"] = data.is_monotonic
                if hasattr(data, "aggregation_temporality"):
                    base["temporality"] = TEMPORALITIES.get(
                        data.aggregation_temporality, str(data.aggregation_temporality)
                    )
                for point in data.data_points:
                    line = dict(base, attributes=attributes(point.attributes))
                    if kind in ("sum", "gauge"):
                        line["value"] = number(point)
                    else:
                        line["count"] = point.count
                        line["sum"] = point.sum
                    yield line


ROUTES = {
    "/v1/traces": (
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
        span_lines,
    ),
    "/v1/metrics": (
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
        metric_lines,
    ),
}


class Sink:
    """Where the lines go: one writer at a time, flushed per request."""

    def __init__(self, out):
        self.out = out
        self.lock = threading.Lock()

    def write(self, lines):
        text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)
        with self.lock:
            self.out.write(text)
            self.out.flush()


def handler_for(sink):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, status, body=b"", content_type="text/plain"):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            route = ROUTES.get(self.path)
            if route is None:
                self.reply(404, b"only /v1/traces and /v1/metrics\n")
                return
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if content_type != PROTOBUF:
                self.reply(415, f"only {PROTOBUF}, not {content_type!r}\n".encode())
                return
            request_type, response_type, lines = route
            request = request_type()
            try:
                request.ParseFromString(body)
            except Exception as e:  # a malformed body is the sender's fault
                self.reply(400, f"not a {request_type.__name__}: {e}\n".encode())
                return
            sink.write(lines(request))
            self.reply(200, response_type().SerializeToString(), PROTOBUF)

        def log_message(self, format, *args):
            pass

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--out", help="file the JSON lines go to (default: stdout)")
    args = parser.parse_args()

    out = open(args.out, "a", encoding="utf-8") if args.out else sys.stdout
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(Sink(out)))
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
