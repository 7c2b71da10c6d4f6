"""A stand-in OpenTelemetry collector: OTLP/HTTP on 127.0.0.1, every request decoded with the
official `opentelemetry-proto` messages (no Collector build is in the registries here).

It keeps each request's raw bytes too, so a test can look for argument text anywhere in
what was sent, and can answer late (`delay`) to play a slow collector.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

MAX_BODY = 4 * 1024 * 1024


class Collector:
    """`with Collector() as c:` listens; `c.endpoint` is OTEL_EXPORTER_OTLP_ENDPOINT."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.raw: list[bytes] = []
        self.logs: list[logs_service_pb2.ExportLogsServiceRequest] = []
        self.metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Collector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def events(self, name: str = "gen_ai.guardrail.result") -> list[dict[str, Any]]:
        """Every log record named `name`, as {attribute: value}, with the resource's
        attributes under "resource"."""
        found = []
        with self._lock:
            requests = list(self.logs)
        for request in requests:
            for resource_logs in request.resource_logs:
                resource = {a.key: _value(a.value) for a in resource_logs.resource.attributes}
                for scope_logs in resource_logs.scope_logs:
                    for record in scope_logs.log_records:
                        if record.event_name == name:
                            attributes = {a.key: _value(a.value) for a in record.attributes}
                            found.append({**attributes, "resource": resource})
        return found

    def sums(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], float]:
        """The latest value of every counter and gauge point (counters cumulative), by
        (name, attributes); a histogram's point gives its count."""
        found: dict[tuple[str, frozenset[tuple[str, Any]]], float] = {}
        with self._lock:
            requests = list(self.metrics)
        for request in requests:
            for metric in _metrics(request):
                if metric.HasField("sum"):
                    points: Any = metric.sum.data_points
                elif metric.HasField("histogram"):
                    points = metric.histogram.data_points
                elif metric.HasField("gauge"):
                    points = metric.gauge.data_points
                else:
                    continue
                for point in points:
                    labels = frozenset((a.key, _value(a.value)) for a in point.attributes)
                    value = point.count if metric.HasField("histogram") else point.as_int
                    found[(metric.name, labels)] = value
        return found

    def wait(self, predicate: Any, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.05)
        return bool(predicate())

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, MAX_BODY))
                if collector.delay:
                    time.sleep(collector.delay)
                if self.path == "/v1/logs":
                    request: Any = logs_service_pb2.ExportLogsServiceRequest()
                    request.ParseFromString(body)
                    reply = logs_service_pb2.ExportLogsServiceResponse()
                    target: list[Any] = collector.logs
                elif self.path == "/v1/metrics":
                    request = metrics_service_pb2.ExportMetricsServiceRequest()
                    request.ParseFromString(body)
                    reply = metrics_service_pb2.ExportMetricsServiceResponse()
                    target = collector.metrics
                else:
                    self.send_error(404)
                    return
                with collector._lock:
                    collector.raw.append(body)
                    target.append(request)
                data = reply.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                # A client that gave up waiting (the slow collector) has closed its end.
                with contextlib.suppress(OSError):
                    self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _metrics(request: metrics_service_pb2.ExportMetricsServiceRequest) -> Iterator[Any]:
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            yield from scope_metrics.metrics


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def otel_env(endpoint: str, **more: str) -> dict[str, str]:
    """The standard variables an operator sets, with metrics sent every 200 ms so a test
    sees them quickly."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "loop-guard-test",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
        "OTEL_BLRP_SCHEDULE_DELAY": "100",
        **more,
    }
