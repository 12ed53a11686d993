"""The OpenTelemetry side: one resource per process (the attributes sonde
reads as the report's origin, see the host's `ingest/otlp/resource.rs`), the
SDK's providers with their batching processors, and exporters wrapped so
that what could not be delivered is counted.

Everything leaves through the official SDK's OTLP exporters, on the SDK's
own background threads, as plain OTLP any collector takes.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

#: Resource attributes sonde reads as the origin of every report.
JOB = "sonde.job"
ROLE = "sonde.role"
INDEX = "sonde.index"
RANK = "sonde.rank"
LOCAL_RANK = "sonde.local_rank"
WORLD_SIZE = "sonde.world_size"
#: Span attribute: the batch a timing belongs to (also: that batch is current from the span's start).
BATCH_IDX = "sonde.batch_idx"
#: Log record names and attributes of liveness and lifecycle (the host's `ingest/otlp/events.rs`).
HEARTBEAT = "sonde.heartbeat"
NODE_EVENT = "sonde.node_event"
NODE_EVENT_KIND = "sonde.node_event.kind"
NODE_EVENT_REASON = "sonde.node_event.reason"
NODE_EVENT_EXIT_CODE = "sonde.node_event.exit_code"
#: Named progress: a gauge whose points carry `sonde.progress.name`.
PROGRESS = "sonde.progress"
PROGRESS_NAME = "sonde.progress.name"


def resource(
    job: str,
    node: str,
    *,
    role: str = "",
    index: Optional[int] = None,
    rank: Optional[int] = None,
    local_rank: Optional[int] = None,
    world_size: Optional[int] = None,
    extra: Optional[Mapping[str, Any]] = None,
) -> Resource:
    attrs: Dict[str, Any] = {"service.name": job, JOB: job, "host.name": node}
    for key, v in ((ROLE, role or None), (INDEX, index), (RANK, rank), (LOCAL_RANK, local_rank), (WORLD_SIZE, world_size)):
        if v is not None:
            attrs[key] = v
    attrs.update(extra or {})
    return Resource.create(attrs)


class Counts:
    """What the exporters delivered and what they could not (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0

    def add(self, ok: bool, n: int) -> None:
        with self._lock:
            if ok:
                self.exported += n
            else:
                self.failed += n


class CountingSpanExporter(SpanExporter):
    """Passes spans to the real exporter and counts how many it delivered."""

    def __init__(self, inner: SpanExporter, counts: Counts) -> None:
        self.inner, self.counts = inner, counts

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter that raises has still not delivered them
            result = SpanExportResult.FAILURE
        self.counts.add(result == SpanExportResult.SUCCESS, len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _headers(token: Optional[str]) -> Optional[Dict[str, str]]:
    return {"authorization": f"Bearer {token}"} if token else None


def span_exporter(endpoint: str, proto: str, timeout_s: float, token: Optional[str] = None) -> SpanExporter:
    if proto == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        return GrpcSpans(endpoint=endpoint, insecure=endpoint.startswith("http://"), timeout=timeout_s, headers=_headers(token))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    return HttpSpans(endpoint=endpoint + "/v1/traces", timeout=timeout_s, headers=_headers(token))


def metric_exporter(endpoint: str, proto: str, timeout_s: float, token: Optional[str] = None) -> Any:
    if proto == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        return GrpcMetrics(endpoint=endpoint, insecure=endpoint.startswith("http://"), timeout=timeout_s, headers=_headers(token))
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

    return HttpMetrics(endpoint=endpoint + "/v1/metrics", timeout=timeout_s, headers=_headers(token))


def log_exporter(endpoint: str, proto: str, timeout_s: float, token: Optional[str] = None) -> Any:
    if proto == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs

        return GrpcLogs(endpoint=endpoint, insecure=endpoint.startswith("http://"), timeout=timeout_s, headers=_headers(token))
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs

    return HttpLogs(endpoint=endpoint + "/v1/logs", timeout=timeout_s, headers=_headers(token))


class Pipeline:
    """The SDK providers of one reporter, made when first needed: traces
    (timings, serving rows), metrics (gauges), logs (heartbeats, node events).
    `exporter` replaces the OTLP span exporter (tests use the SDK's in-memory one)."""

    def __init__(
        self,
        res: Resource,
        endpoint: str,
        proto: str,
        *,
        token: Optional[str] = None,
        export_timeout_s: float = 5.0,
        schedule_delay_ms: int = 100,
        metric_interval_ms: int = 1000,
        max_queue_size: int = 16384,
        span_exporter_override: Optional[SpanExporter] = None,
    ) -> None:
        self.resource, self.endpoint, self.proto, self.token = res, endpoint, proto, token
        self.timeout_s, self.delay_ms, self.metric_interval_ms = export_timeout_s, schedule_delay_ms, metric_interval_ms
        self.max_queue_size = max_queue_size
        self.span_counts = Counts()
        self._span_override = span_exporter_override
        self._lock = threading.Lock()
        self._tracers: Optional[TracerProvider] = None
        self._meters: Any = None
        self._logs: Any = None
        self._log_processor: Any = None

    def tracer_provider(self) -> TracerProvider:
        with self._lock:
            if self._tracers is None:
                inner = self._span_override or span_exporter(self.endpoint, self.proto, self.timeout_s, self.token)
                tp = TracerProvider(resource=self.resource)
                tp.add_span_processor(
                    BatchSpanProcessor(
                        CountingSpanExporter(inner, self.span_counts),
                        schedule_delay_millis=self.delay_ms,
                        max_queue_size=self.max_queue_size,
                        max_export_batch_size=512,
                    )
                )
                self._tracers = tp
            return self._tracers

    def meter_provider(self) -> Any:
        with self._lock:
            if self._meters is None:
                from opentelemetry.sdk.metrics import MeterProvider
                from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

                if self._span_override is not None:
                    # Spans to memory (tests): metrics stay in memory too.
                    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

                    reader: Any = InMemoryMetricReader()
                    self.metric_reader = reader
                else:
                    reader = PeriodicExportingMetricReader(
                        metric_exporter(self.endpoint, self.proto, self.timeout_s, self.token),
                        export_interval_millis=self.metric_interval_ms,
                    )
                self._meters = MeterProvider(resource=self.resource, metric_readers=[reader])
            return self._meters

    def logger(self, name: str) -> Any:
        with self._lock:
            if self._logs is None:
                from opentelemetry.sdk._logs import LoggerProvider
                from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

                self._logs = LoggerProvider(resource=self.resource)
                if self._span_override is not None:
                    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

                    self.log_memory: Any = InMemoryLogRecordExporter()
                    exporter: Any = self.log_memory
                else:
                    exporter = log_exporter(self.endpoint, self.proto, self.timeout_s, self.token)
                self._log_processor = BatchLogRecordProcessor(exporter, schedule_delay_millis=self.delay_ms)
                self._logs.add_log_record_processor(self._log_processor)
            return self._logs.get_logger(name)

    def flush(self, timeout_s: float = 10.0) -> bool:
        ok = True
        ms = int(timeout_s * 1000)
        for p in (self._tracers, self._meters, self._logs):
            if p is not None:
                ok = bool(p.force_flush(ms)) and ok
        return ok

    def shutdown(self) -> None:
        with self._lock:
            providers = [p for p in (self._tracers, self._meters, self._logs) if p is not None]
            self._tracers = self._meters = self._logs = None
        for p in providers:
            p.shutdown()


#: A queued item: (name, start_ns, end_ns, batch_idx or None); name None = a batch-index update.
Item = Tuple[Optional[str], int, int, Optional[int]]


class SpanWriter:
    """Items → SDK spans (and the batch-index gauge), in one process."""

    def __init__(self, pipeline: "Pipeline") -> None:
        self.pipeline = pipeline
        self.recorded = 0
        self._gauge: Any = None

    def write(self, items: List[Item]) -> None:
        tracer = self.pipeline.tracer_provider().get_tracer("sonde.agent")
        n = 0
        for name, start, end, b in items:
            if name is None:
                if self._gauge is None:
                    meter = self.pipeline.meter_provider().get_meter("sonde.agent")
                    self._gauge = meter.create_gauge(BATCH_IDX, unit="{batch}", description="the batch now running")
                self._gauge.set(b)
                continue
            attrs: Dict[str, Any] = {} if b is None else {BATCH_IDX: b}
            tracer.start_span(name, start_time=start, attributes=attrs).end(end_time=end)
            n += 1
        self.recorded += n


def pipeline_from(cfg: Dict[str, Any]) -> "Pipeline":
    res = resource(cfg["job"], cfg["node"], **cfg["resource"])
    return Pipeline(
        res,
        cfg["endpoint"],
        cfg["protocol"],
        token=cfg.get("token"),
        export_timeout_s=cfg["export_timeout_s"],
        schedule_delay_ms=cfg["schedule_delay_ms"],
        metric_interval_ms=cfg["metric_interval_ms"],
    )
