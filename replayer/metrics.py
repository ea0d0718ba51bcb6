"""The replayer's Prometheus metrics (``--metrics-listen``), for watching a long replay.

Counts that the dispatcher already keeps (due, sent, dropped, in flight) are
read at scrape time, costing the send path nothing; completions feed the
histograms from ``observe``, called with each result record. Labels are
bounded: route (a known API path or "other"), model (the first 20 seen, then
"other") and status class.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailreplay.dialects import ROUTES, route_label
from tailreplay.prometheus import LATENCY_BUCKETS, STATUS_CLASSES, BoundedLabel, status_class
from tailreplay.replayer.dispatch import DispatchStats
from tailreplay.traces.archive.record import Record

__all__ = ["ReplayMetrics"]

_LAG = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class _DispatchCollector(Collector):
    def __init__(self, stats: DispatchStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        for kind, name, doc, value in (
            (CounterMetricFamily, "tailreplay_replay_due", "Requests whose time came.", s.due),
            (CounterMetricFamily, "tailreplay_replay_sent", "Requests sent.", s.sent),
            (
                CounterMetricFamily,
                "tailreplay_replay_dropped",
                "Requests not sent: no free slot (--max-inflight) in time.",
                s.dropped,
            ),
            (GaugeMetricFamily, "tailreplay_replay_in_flight", "Requests in flight.", s.in_flight),
        ):
            family: Any = kind(name, doc)
            family.add_metric([], value)
            yield family


class ReplayMetrics:
    def __init__(self, stats: DispatchStats) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_DispatchCollector(stats))
        self.model = BoundedLabel()
        labels = ["route", "model"]
        self.completed = Counter(
            "tailreplay_replay_requests",
            "Requests completed, by status class (error: no response).",
            [*labels, "status"],
            registry=self.registry,
        )
        self.errors = Counter(
            "tailreplay_replay_errors",
            "Requests that failed: a transport error or an HTTP 4xx/5xx.",
            [*labels, "status"],
            registry=self.registry,
        )
        # Every route and status class from the start, at 0: a clean run's error panel
        # reads 0, not "no data". (Models are only known as they come: "none" here.)
        for route in ROUTES:
            for status in STATUS_CLASSES:
                self.completed.labels(route, "none", status)
                self.errors.labels(route, "none", status)
        self.tokens = Counter(
            "tailreplay_replay_tokens",
            "Tokens the target reported.",
            [*labels, "kind"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tailreplay_replay_request_duration_seconds",
            "Send to last byte.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.ttft = Histogram(
            "tailreplay_replay_ttft_seconds",
            "Send to the first token of a streamed (SSE) response.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.lag = Histogram(
            "tailreplay_replay_lag_seconds",
            "How late each request left, against its due time.",
            buckets=_LAG,
            registry=self.registry,
        )

    def observe(self, r: Record) -> None:
        """Fold one result record in (dropped ones are counted by the dispatcher)."""
        if r.error == "dropped":
            return
        route, model, status = route_label(r.path), self.model(r.model), status_class(r.status)
        self.completed.labels(route, model, status).inc()
        if r.is_error:
            self.errors.labels(route, model, status).inc()
        if r.lag_ns is not None:
            self.lag.observe(max(r.lag_ns, 0) / 1e9)
        if r.duration_ns is not None:
            self.latency.labels(route, model).observe(r.duration_ns / 1e9)
        if r.ttfb_ns is not None and r.stream:
            self.ttft.labels(route, model).observe(r.ttfb_ns / 1e9)
        if r.input_tokens:
            self.tokens.labels(route, model, "input").inc(r.input_tokens)
        if r.output_tokens:
            self.tokens.labels(route, model, "output").inc(r.output_tokens)
