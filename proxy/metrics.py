"""The proxy's Prometheus metrics: a sink for exchanges, plus the recorder's counters.

Labels are bounded: ``route`` is a known API path or "other", ``status`` a class
(2xx, 4xx, 5xx, or "error" when no response came).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.recording import ROUTES, RecorderClient, Stat

__all__ = ["ProxyMetrics", "status_class"]

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def status_class(ex: Exchange) -> str:
    if ex.error is not None and ex.status == 0:
        return "error"
    return f"{ex.status // 100}xx"


class _RecorderCollector(Collector):
    def __init__(self, recorder: RecorderClient) -> None:
        self.recorder = recorder

    def collect(self) -> Iterator[Metric]:
        r, stats = self.recorder, self.recorder.stats

        def one(kind: type[Any], name: str, doc: str, value: float) -> Metric:
            family = kind(name, doc)
            family.add_metric([], value)
            return family  # type: ignore[no-any-return]

        yield one(
            CounterMetricFamily,
            "tailreplay_proxy_records_written",
            "Records written to the archive.",
            stats[Stat.WRITTEN],
        )
        yield one(
            CounterMetricFamily,
            "tailreplay_proxy_records_dropped",
            "Records lost to a backed-up recorder or a failing disk (traffic was not affected).",
            r.total_dropped,
        )
        yield one(
            CounterMetricFamily,
            "tailreplay_proxy_records_sampled_out",
            "Records left out by --sample.",
            stats[Stat.SAMPLED_OUT],
        )
        yield one(
            GaugeMetricFamily,
            "tailreplay_proxy_record_backlog",
            "Exchanges being recorded.",
            stats[Stat.BACKLOG],
        )
        tokens = CounterMetricFamily(
            "tailreplay_proxy_tokens",
            "Tokens, from the upstream's usage or estimated.",
            labels=["route", "kind"],
        )
        for i, route in enumerate(ROUTES):
            tokens.add_metric([route, "input"], stats[Stat.TOKENS + 2 * i])
            tokens.add_metric([route, "output"], stats[Stat.TOKENS + 2 * i + 1])
        yield tokens


class ProxyMetrics:
    """The metrics sink; ``registry`` is what the admin port serves."""

    def __init__(self, recorder: RecorderClient | None = None) -> None:
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
        self.in_flight = Gauge(
            "tailreplay_proxy_in_flight", "Requests in flight.", registry=self.registry
        )
        self._in_flight = 0
        self.in_flight.set_function(lambda: self._in_flight)
        # labels() takes a lock and builds a key every call; on the request path we
        # look each labelled child up once and keep it.
        self._children: dict[tuple[str, str], tuple[Any, Any, Any]] = {}

    def _for(self, route: str, status: str) -> tuple[Any, Any, Any]:
        key = (route, status)
        child = self._children.get(key)
        if child is None:
            child = (
                self.requests.labels(route, status),
                self.latency.labels(route),
                self.ttfb.labels(route),
            )
            self._children[key] = child
        return child

    def on_request(self, ex: Exchange) -> None:
        self._in_flight += 1

    def on_chunk(self, ex: Exchange, size: int) -> None:
        pass

    def on_complete(self, ex: Exchange) -> None:
        self._in_flight -= 1
        requests, latency, ttfb = self._for(ex.route, status_class(ex))
        requests.inc()
        if ex.duration_ns is not None:
            latency.observe(ex.duration_ns / 1e9)
        if ex.ttfb_ns is not None:
            ttfb.observe(ex.ttfb_ns / 1e9)
