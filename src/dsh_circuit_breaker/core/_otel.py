"""The OpenTelemetry SDK behind telemetry.py (the `otel` extra): imported only when there is
something to export. The providers are this package's own, never the global ones, so an
application's own OpenTelemetry setup is left as it was; the exporters read the standard
`OTEL_EXPORTER_OTLP_*` variables (endpoint, headers, certificate, compression) themselves.

An export never holds up a decision: events and metrics are queued and sent by the SDK's
own threads, each request bounded by the export timeout; what a collector that is down
or slow does not take is dropped, and said once on stderr.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExportResult
from opentelemetry.sdk.resources import Resource

from .._version import COMPONENT, __version__
from ._log import warn

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .breaker import Decision

SCOPE = "dsh_circuit_breaker"
EVENT = "gen_ai.guardrail.result"  # the event a refusal exports (telemetry.attributes)
# The HTTP guard's histogram buckets (guard/metrics.py), so both views bucket alike.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)

QUIET_SECONDS = 3600  # how long one process's warning stands for every process of the user
_lock = threading.Lock()
_events: Events | None = None
_meters: Meters | None = None
_warned: set[str] = set()


def events(seconds: float) -> Events:
    """This process's event exporter (the first caller's export bound holds)."""
    global _events
    with _lock:
        if _events is None:
            _quiet_exporters()
            _events = Events(seconds)
        return _events


def meters(seconds: float) -> Meters:
    """This process's decision metrics. The metrics SDK is imported here, not with the
    module: a command hook's refusal exports an event only, and imports less."""
    global _meters
    with _lock:
        if _meters is None:
            _quiet_exporters()
            _meters = Meters(_metric_exporter(seconds))
        return _meters


def flush() -> None:
    if _events is not None:
        _events.flush()


class Events:
    """`gen_ai.guardrail.result` events, batched and sent by the SDK's worker thread."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.provider = LoggerProvider(resource=_resource())
        exporter = _LogExporter(timeout=seconds)
        self.provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
        self.logger = self.provider.get_logger(SCOPE, __version__)

    def emit(self, attributes: dict[str, str | int]) -> None:
        self.logger.emit(
            event_name=EVENT,
            severity_number=SeverityNumber.INFO,
            attributes=attributes,
        )

    def flush(self) -> None:
        """Send what is queued, waiting at most the export bound: a process about to exit
        (the command hook) leaves the rest behind."""
        sender = threading.Thread(target=self.provider.force_flush, daemon=True)
        sender.start()
        sender.join(self.seconds)
        if sender.is_alive():
            _warn_once(
                "events",
                f"the OpenTelemetry collector did not take the events within {self.seconds}s;"
                " dropped",
            )


class Meters:
    """The HTTP guard's Prometheus counters (guard/metrics.py), as OpenTelemetry metrics: a
    Prometheus-compatible backend shows `dsh_circuit_breaker.decisions` as
    `dsh_circuit_breaker_decisions_total`, and the histogram as
    `dsh_circuit_breaker_decision_seconds`."""

    clock = staticmethod(time.perf_counter)

    def __init__(self, exporter: Any) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        reader = PeriodicExportingMetricReader(exporter)  # OTEL_METRIC_EXPORT_INTERVAL
        self.provider = MeterProvider(resource=_resource(), metric_readers=[reader])
        self.meter = meter = self.provider.get_meter(SCOPE, __version__)
        self.decisions = meter.create_counter(
            "dsh_circuit_breaker.decisions",
            unit="{call}",
            description="Tool calls judged, by harness and kind (allow, or the denial's kind).",
        )
        self.denials = meter.create_counter(
            "dsh_circuit_breaker.denials", unit="{call}", description="Tool calls denied."
        )
        self.stops = meter.create_counter(
            "dsh_circuit_breaker.stops",
            unit="{call}",
            description="Denials that told the harness to end the agent (stopAfterDenials).",
        )
        self.seconds = meter.create_histogram(
            "dsh_circuit_breaker.decision",
            unit="s",
            description="Time to judge one tool call, store included.",
            explicit_bucket_boundaries_advisory=BUCKETS,
        )

    def track_agents(self, count: Callable[[], int | None]) -> None:
        """The store's live agents, read at each export (`count` None: not readable now,
        and nothing is reported rather than 0), as the HTTP guard's gauge."""
        from opentelemetry.metrics import CallbackOptions, Observation

        def observe(options: CallbackOptions) -> list[Observation]:
            found = count()
            return [] if found is None else [Observation(found)]

        self.meter.create_observable_gauge(
            "dsh_circuit_breaker.agents_tracked",
            callbacks=[observe],
            unit="{agent}",
            description="Live agents in the state store (every process and machine sharing it).",
        )

    def decided(self, harness: str, decision: Decision, started: float) -> None:
        elapsed = time.perf_counter() - started
        self.decisions.add(1, {"harness": harness, "kind": decision.kind or "allow"})
        if not decision.allowed:
            self.denials.add(1, {"harness": harness, "kind": decision.kind or ""})
        if decision.stop:
            self.stops.add(1, {"harness": harness, "kind": decision.kind or ""})
        self.seconds.record(elapsed, {"harness": harness})


class _LogExporter(OTLPLogExporter):
    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        try:
            result = super().export(batch)
        except Exception as exc:
            result = LogRecordExportResult.FAILURE
            _warn_once("events", f"OpenTelemetry events not exported ({exc})")
        if result is not LogRecordExportResult.SUCCESS:
            _warn_once("events", "the OpenTelemetry collector did not take the events; dropped")
        return result


def _metric_exporter(seconds: float) -> Any:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData

    class MetricExporter(OTLPMetricExporter):
        def export(
            self, metrics_data: MetricsData, timeout_millis: float | None = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            try:
                result = super().export(metrics_data, timeout_millis, **kwargs)
            except Exception as exc:
                result = MetricExportResult.FAILURE
                _warn_once("metrics", f"OpenTelemetry metrics not exported ({exc})")
            if result is not MetricExportResult.SUCCESS:
                text = "the OpenTelemetry collector did not take the metrics; dropped"
                _warn_once("metrics", text)
            return result

    return MetricExporter(timeout=seconds)


def _resource() -> Resource:
    """The standard variables' resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), named
    after this package where they name no service."""
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": COMPONENT}))
    return resource


def _quiet_exporters() -> None:
    """The exporters log every failed request (with `logging`'s last-resort handler, one
    stderr line each); a collector that is down is said once, by `_warn_once`, instead."""
    for name in (
        "opentelemetry.exporter.otlp.proto.http._log_exporter",
        "opentelemetry.exporter.otlp.proto.http.metric_exporter",
        "opentelemetry.sdk._shared_internal",
    ):
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if protocol != "http/protobuf":
        text = f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: only http/protobuf is sent"
        _warn_once("protocol", text)


def _warn_once(what: str, text: str) -> None:
    if what not in _warned:
        _warned.add(what)
        if not _said_lately(what):
            warn("dsh-circuit-breaker: %s (said once an hour)", text)


def _said_lately(what: str) -> bool:
    """Whether a process of this user said `what` within the hour (a file's time in the
    state directory says when): a command hook is a process per call, and a collector that
    is down must not cost a line on stderr for every refused call."""
    from .files import check_directory, default_state_dir, open_private

    directory = default_state_dir()
    path = os.path.join(directory, f"otel-{what}-said")
    try:
        if time.time() - os.lstat(path).st_mtime < QUIET_SECONDS:
            return True
    except OSError:
        pass  # never said, or not readable: say it
    try:
        check_directory(directory)
        fd = open_private(path, os.O_WRONLY | os.O_CREAT)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
    except OSError:
        pass  # no state directory of ours to remember it in: this process says it
    return False
