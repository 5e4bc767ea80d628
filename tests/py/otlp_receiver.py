"""An OTLP/HTTP receiver for the tests: takes the protobuf exports of traces and metrics a
process sends (decoded with opentelemetry-proto, the OpenTelemetry project's own messages)
and writes each span and each histogram data point as a JSON line to the file given.
Prints the port it listens on (127.0.0.1), then serves until killed.

usage: otlp_receiver.py OUT_FILE
"""

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = open(sys.argv[1], "a", buffering=1)
LOCK = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    if kind in ("string_value", "bool_value", "int_value", "double_value"):
        return getattr(v, kind)
    return str(v)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def write(record):
    with LOCK:
        OUT.write(json.dumps(record) + "\n")


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for rs in request.resource_spans:
                service = attributes(rs.resource.attributes).get("service.name")
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        write({
                            "signal": "span", "service": service, "name": s.name, "kind": s.kind,
                            "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "attributes": attributes(s.attributes), "status": s.status.code,
                        })
            answer = ExportTraceServiceResponse()
        elif self.path == "/v1/metrics":
            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            for rm in request.resource_metrics:
                service = attributes(rm.resource.attributes).get("service.name")
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.WhichOneof("data") != "histogram":
                            continue
                        for dp in m.histogram.data_points:
                            write({
                                "signal": "metric", "service": service, "name": m.name,
                                "unit": m.unit, "attributes": attributes(dp.attributes),
                                "count": dp.count,
                            })
            answer = ExportMetricsServiceResponse()
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = answer.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
