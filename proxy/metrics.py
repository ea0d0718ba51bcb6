"""The proxy's Prometheus metrics: a sink for exchanges, plus the recorder's counters.

Labels are bounded: ``route`` is a known API path or "other", ``status`` a class
(2xx, 4xx, 5xx, or "error" when no response came).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tailreplay.dialects import ROUTES
from tailreplay.prometheus import LATENCY_BUCKETS, STATUS_CLASSES, status_class
from tailreplay.proxy.admission import ConnectionGuard
from tailreplay.proxy.dot_segments import PATH_OUTSIDE
from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.recorder_sink import RecorderClient
from tailreplay.proxy.upstream_path import AnswerCounts

__all__ = ["ProxyMetrics", "Series", "cumulative"]

_LATENCY = LATENCY_BUCKETS


class _RecorderCollector(Collector):
    def __init__(self, recorder: RecorderClient) -> None:
        self.recorder = recorder

    def collect(self) -> Iterator[Metric]:
        counts = self.recorder.counts()

        def one(kind: type[Any], name: str, doc: str, value: float) -> Metric:
            family = kind(name, doc)
            family.add_metric([], value)
            return family  # type: ignore[no-any-return]

        yield one(
            CounterMetricFamily,
            "tailreplay_proxy_records_written",
            "Records written to the archive.",
            counts.written,
        )
        yield one(
            CounterMetricFamily,
            "tailreplay_proxy_records_dropped",
            "Records lost to a backed-up or dead recorder or a failing disk "
            "(traffic was not affected).",
            counts.dropped,
        )
        yield one(
            CounterMetricFamily,
            "tailreplay_proxy_records_sampled_out",
            "Records left out by --sample.",
            counts.sampled_out,
        )
        yield one(
            CounterMetricFamily,
            "tailreplay_proxy_records_shed",
            "Records written without their prompt's body, hashes and statistics, while "
            "the recorder was behind (a part of those written).",
            counts.shed,
        )
        yield one(
            GaugeMetricFamily,
            "tailreplay_proxy_record_backlog",
            "Exchanges served and not yet written, dropped, sampled out or failed.",
            counts.backlog,
        )
        yield one(
            GaugeMetricFamily,
            "tailreplay_proxy_capture_up",
            "1 while exchanges are being recorded, 0 while the recorder is down or hung "
            "or records were dropped in the last 10 s.",
            0 if self.recorder.problem() else 1,
        )
        yield one(
            CounterMetricFamily,
            "tailreplay_proxy_recorder_restarts",
            "Times the recorder process died and was started again.",
            self.recorder.restarts,
        )
        tokens = CounterMetricFamily(
            "tailreplay_proxy_tokens",
            "Tokens, from the upstream's usage or estimated.",
            labels=["route", "kind"],
        )
        for i, route in enumerate(ROUTES):
            tokens.add_metric([route, "input"], counts.tokens[2 * i])
            tokens.add_metric([route, "output"], counts.tokens[2 * i + 1])
        yield tokens


class _ConnectionCollector(Collector):
    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard

    def collect(self) -> Iterator[Metric]:
        g = self.guard
        yield GaugeMetricFamily(
            "tailreplay_proxy_client_connections", "Client connections open.", value=g.open
        )
        yield GaugeMetricFamily(
            "tailreplay_proxy_client_connections_max",
            "The client-connection cap (--max-connections, or what the open-file limit allows).",
            value=g.cap,
        )
        for name, doc, value in (
            (
                "evicted",
                "Client connections closed to admit new ones at the cap: silent, idle, or "
                "sending a head too slowly.",
                g.evicted,
            ),
            ("refused", "Client connections refused with a 503 at the cap.", g.refused),
            (
                "peer_refused",
                "Client connections refused with a 503: their peer (client IP) held "
                "--max-connections-per-peer already, none of them to push out.",
                g.peer_refused,
            ),
            (
                "storms_refused",
                "Of those refused at the cap, connections of a peer reconnecting in a storm "
                "(which may push out only silent, long-idle or slow-head connections).",
                g.storms_refused,
            ),
            (
                "body_timeouts",
                "Requests answered 408: a body paused past --body-timeout, under the minimum "
                "pace, or not whole within --timeout.",
                g.body_timeouts,
            ),
            (
                "slow_bodies_evicted",
                "Connections closed at the cap for a newcomer: of those sending a body, the "
                "one needing the longest to arrive (a second or more).",
                g.slow_bodies_evicted,
            ),
            ("accept_errors", "Failed accept() calls (no descriptors or memory).", g.accept_errors),
            ("malformed", "Requests the HTTP parser refused with a 400.", g.malformed),
        ):
            yield CounterMetricFamily(f"tailreplay_proxy_connections_{name}", doc, value=value)


class Series:
    """One route's and status class's counts: plain ints, folded into families at scrape.

    prometheus_client's Counter and Histogram take a lock and walk Python objects
    on every observation — several microseconds a request, on the proxy's one
    thread. Here an observation is a bisect and two additions; the buckets are
    made cumulative only when /metrics is read (on the same thread, so no lock).
    """

    __slots__ = ("latency", "latency_sum", "requests", "ttft", "ttft_sum")

    def __init__(self) -> None:
        self.requests = 0
        self.latency = [0] * (len(_LATENCY) + 1)
        self.latency_sum = 0.0
        self.ttft = [0] * (len(_LATENCY) + 1)
        self.ttft_sum = 0.0

    def observe(self, ex: Exchange) -> None:
        """Count a finished exchange: its latency, and its TTFT when it was streamed."""
        self.requests += 1
        if ex.duration_ns is not None:
            seconds = ex.duration_ns / 1e9
            self.latency[bisect_left(_LATENCY, seconds)] += 1
            self.latency_sum += seconds
        if ex.ttfb_ns is not None and ex.timeline is not None:  # TTFT: streamed only
            seconds = ex.ttfb_ns / 1e9
            self.ttft[bisect_left(_LATENCY, seconds)] += 1
            self.ttft_sum += seconds


def cumulative(counts: list[int]) -> list[tuple[str, float]]:
    out, total = [], 0
    for bound, n in zip((*map(str, _LATENCY), "+Inf"), counts, strict=True):
        total += n
        out.append((bound, float(total)))
    return out


class _RequestCollector(Collector):
    def __init__(self, metrics: ProxyMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        requests = CounterMetricFamily(
            "tailreplay_proxy_requests", "Requests proxied.", labels=["route", "status"]
        )
        latency = HistogramMetricFamily(
            "tailreplay_proxy_request_duration_seconds",
            "Arrival to last byte delivered.",
            labels=["route"],
        )
        ttft = HistogramMetricFamily(
            "tailreplay_proxy_ttft_seconds",
            "Arrival to the first token of a streamed (SSE) response.",
            labels=["route"],
        )
        by_route: dict[str, list[Series]] = {}
        for route in ROUTES:  # every known series from the start, at 0 until counted
            for status in STATUS_CLASSES:
                series = m.series.get((route, status))
                requests.add_metric([route, status], series.requests if series else 0)
                if series is not None:
                    by_route.setdefault(route, []).append(series)
        for route, group in by_route.items():
            lat = [sum(c) for c in zip(*(g.latency for g in group), strict=True)]
            first = [sum(c) for c in zip(*(g.ttft for g in group), strict=True)]
            latency.add_metric([route], cumulative(lat), sum(g.latency_sum for g in group))
            ttft.add_metric([route], cumulative(first), sum(g.ttft_sum for g in group))
        yield requests
        yield latency
        yield ttft
        yield GaugeMetricFamily(
            "tailreplay_proxy_in_flight", "Requests in flight.", value=m.in_flight
        )
        yield CounterMetricFamily(
            "tailreplay_proxy_paths_refused",
            "Requests refused with a 400: their path's dot-segments lead outside the "
            "upstream's base path (or to another --route).",
            value=m.paths_refused,
        )


class ProxyMetrics:
    """The metrics sink; ``registry`` is what the admin port serves."""

    def __init__(
        self, recorder: RecorderClient | None = None, guard: ConnectionGuard | None = None
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        if recorder is not None:
            self.registry.register(_RecorderCollector(recorder))
        if guard is not None:
            self.registry.register(_ConnectionCollector(guard))
        self.series: dict[tuple[str, str], Series] = {}
        self.in_flight = 0
        self.paths_refused = 0
        self.answers = AnswerCounts()
        """The upstream's answers and its 404s (``/healthz`` and the exit line)."""
        self.registry.register(_RequestCollector(self))

    def on_request(self, ex: Exchange) -> None:
        self.in_flight += 1

    def on_chunk(self, ex: Exchange, size: int) -> None:
        pass

    def on_complete(self, ex: Exchange) -> None:
        self.in_flight -= 1
        key = (ex.route, status_class(ex.status))
        series = self.series.get(key)
        if series is None:  # bounded: route and status class take a few values each
            series = self.series[key] = Series()
        series.observe(ex)
        self.answers.observe(ex)
        if ex.error == PATH_OUTSIDE:
            self.paths_refused += 1
