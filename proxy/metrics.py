"""The proxy's Prometheus metrics: a sink for exchanges, plus the recorder's counters.

Labels are bounded: ``route`` is a known API path or "other", ``status`` a class
(2xx, 4xx, 5xx, or "error" when no response came).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.openai import route_label
from tailreplay.proxy.recorder import Recorder
from tailreplay.traces.record import Record

__all__ = ["ProxyMetrics", "status_class"]

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def status_class(ex: Exchange) -> str:
    if ex.error is not None and ex.status == 0:
        return "error"
    return f"{ex.status // 100}xx"


class _RecorderCollector(Collector):
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def collect(self) -> Iterator[Metric]:
        r = self.recorder
        written = CounterMetricFamily(
            "tailreplay_proxy_records_written", "Records written to the archive."
        )
        written.add_metric([], r.writer.stats.written)
        yield written
        dropped = CounterMetricFamily(
            "tailreplay_proxy_records_dropped",
            "Records lost to a full queue or a failing disk (traffic was not affected).",
        )
        dropped.add_metric([], r.total_dropped)
        yield dropped
        sampled = CounterMetricFamily(
            "tailreplay_proxy_records_sampled_out", "Records left out by --sample."
        )
        sampled.add_metric([], r.sampled_out)
        yield sampled
        depth = GaugeMetricFamily(
            "tailreplay_proxy_record_queue_depth", "Exchanges waiting to be recorded."
        )
        depth.add_metric([], r.queue_depth + len(r.writer._queue))
        yield depth


class ProxyMetrics:
    """The metrics sink; ``registry`` is what the admin port serves."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        if recorder is not None:
            self.registry.register(_RecorderCollector(recorder))
        self.requests = Counter(
            "tailreplay_proxy_requests",
            "Requests proxied.",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tailreplay_proxy_request_duration_seconds",
            "Arrival to last byte delivered.",
            ["route"],
            buckets=_LATENCY,
            registry=self.registry,
        )
        self.ttfb = Histogram(
            "tailreplay_proxy_ttfb_seconds",
            "Arrival to first response byte (for SSE: time to first token).",
            ["route"],
            buckets=_LATENCY,
            registry=self.registry,
        )
        self.tokens = Counter(
            "tailreplay_proxy_tokens",
            "Tokens reported by the upstream's usage.",
            ["route", "kind"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "tailreplay_proxy_in_flight", "Requests in flight.", registry=self.registry
        )

    def on_request(self, ex: Exchange) -> None:
        self.in_flight.inc()

    def on_record(self, record: Record) -> None:
        route = route_label(record.path)
        if record.input_tokens is not None:
            self.tokens.labels(route, "input").inc(record.input_tokens)
        if record.output_tokens is not None:
            self.tokens.labels(route, "output").inc(record.output_tokens)

    def on_chunk(self, ex: Exchange, size: int) -> None:
        pass

    def on_complete(self, ex: Exchange) -> None:
        self.in_flight.dec()
        self.requests.labels(ex.route, status_class(ex)).inc()
        if ex.duration_ns is not None:
            self.latency.labels(ex.route).observe(ex.duration_ns / 1e9)
        if ex.ttfb_ns is not None:
            self.ttfb.labels(ex.route).observe(ex.ttfb_ns / 1e9)
