"""A test OTLP/HTTP receiver: a real HTTP server on a free port that decodes each
``ExportTraceServiceRequest`` (opentelemetry-proto) the exporter posts to ``/v1/traces`` and
keeps the spans as plain dicts (ids as hex, as collectors print them)."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

WAIT_S = 30.0


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _span(resource: dict[str, Any], scope: str, s: Any) -> dict[str, Any]:
    return {
        "trace_id": s.trace_id.hex(),
        "span_id": s.span_id.hex(),
        "parent_id": s.parent_span_id.hex(),
        "trace_state": s.trace_state,
        "name": s.name,
        "kind": s.kind,
        "start": s.start_time_unix_nano,
        "end": s.end_time_unix_nano,
        "attributes": {a.key: _value(a.value) for a in s.attributes},
        "events": [e.name for e in s.events],
        "resource": resource,
        "scope": scope,
    }


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.posts = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._add(request, self.path)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.paths: list[str] = []

    @property
    def url(self) -> str:
        """As Triton takes it: host:port/path, no scheme."""
        return f"127.0.0.1:{self.port}/v1/traces"

    def _add(self, request: Any, path: str) -> None:
        found = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                found += [_span(resource, ss.scope.name, s) for s in ss.spans]
        with self._lock:
            self.spans += found
            self.posts += 1
            self.paths.append(path)

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            spans, self.spans = self.spans, []
        return spans

    def wait_for(
        self, done: Callable[[list[dict[str, Any]]], bool], timeout: float = WAIT_S
    ) -> list[dict[str, Any]]:
        """The spans received so far once ``done(spans)`` holds (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted(s["name"] for s in spans)
                raise AssertionError(f"OTLP spans not complete after {timeout:g} s: {names}")
            time.sleep(0.02)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
