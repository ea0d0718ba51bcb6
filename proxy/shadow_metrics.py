"""The shadow's Prometheus metrics, beside production's: copies sent, dropped and
failed, in flight, and the shadow's latency and TTFT histograms, so a dashboard can
put the two deployments' curves on one panel (same buckets, same route label)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.metrics import Series, cumulative
from tailreplay.proxy.shadow import ShadowCounts

__all__ = ["ShadowMetrics"]


class ShadowMetrics(Collector):
    """Registered in the proxy's registry; ``observe`` each finished copy."""

    def __init__(self, counts: ShadowCounts) -> None:
        self.counts = counts
        self.series: dict[str, Series] = {}

    def observe(self, ex: Exchange) -> None:
        series = self.series.get(ex.route)
        if series is None:  # bounded: a route is a known API path or "other"
            series = self.series[ex.route] = Series()
        series.observe(ex)

    def collect(self) -> Iterator[Metric]:
        c = self.counts
        for name, doc, value in (
            ("sent", "Copies sent to the shadow target (--shadow).", c.sent),
            (
                "dropped",
                "Copies not sent: past --shadow-max-inflight or the memory bound, or the "
                "shadow taken for down.",
                c.dropped,
            ),
            (
                "errors",
                "Copies the shadow failed (no answer, a status of 400 or more, or an "
                "answer the API does not promise).",
                c.errors,
            ),
            (
                "cut",
                "Copies cut at a bound: too many 1xx heads, a head too large, an answer "
                "too long or too slow (docs/shadow.md).",
                c.cut,
            ),
            (
                "throttled",
                "Copies whose answer came faster than the shadow's read budget (1 MiB/s).",
                c.throttled,
            ),
        ):
            yield CounterMetricFamily(f"tailreplay_proxy_shadow_{name}", doc, value=value)
        yield GaugeMetricFamily(
            "tailreplay_proxy_shadow_in_flight",
            "Copies in flight to the shadow.",
            value=c.in_flight,
        )
        latency = HistogramMetricFamily(
            "tailreplay_proxy_shadow_request_duration_seconds",
            "The shadow's answer to a copy: sent to last byte read.",
            labels=["route"],
        )
        ttft = HistogramMetricFamily(
            "tailreplay_proxy_shadow_ttft_seconds",
            "The shadow's first token of a streamed answer to a copy.",
            labels=["route"],
        )
        for route, s in self.series.items():
            latency.add_metric([route], cumulative(s.latency), s.latency_sum)
            ttft.add_metric([route], cumulative(s.ttft), s.ttft_sum)
        yield latency
        yield ttft
