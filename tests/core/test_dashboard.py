"""deploy/grafana-dashboard.json asks only for metrics that the proxy and replayer export."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from yarl import URL

from tailreplay.prometheus import LATENCY_BUCKETS
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.metrics import ProxyMetrics
from tailreplay.proxy.recorder_sink import RecorderClient
from tailreplay.proxy.shadow import ShadowCounts
from tailreplay.proxy.shadow_metrics import ShadowMetrics
from tailreplay.replayer.dispatch import DispatchStats
from tailreplay.replayer.metrics import ReplayMetrics
from tailreplay.traces.archive.record import Record
from tests.helpers import REPO

DASHBOARD = REPO / "deploy" / "grafana-dashboard.json"


def _exported(tmp_path: Path) -> set[str]:
    """Every series name the two registries expose (histograms: _bucket, _count, _sum),
    the proxy's with the shadow's collector registered, as with ``--shadow``."""
    recorder = RecorderClient(ProxyConfig(upstream=URL("http://127.0.0.1:1"), out_dir=tmp_path))
    try:
        proxy = ProxyMetrics(recorder)
        ex = Exchange(
            b"t" * 16,
            b"s" * 8,
            None,
            0,
            0,
            "POST",
            "/v1/chat/completions",
            "/v1/chat/completions",
            [],
            status=200,
            ttfb_ns=1,
            duration_ns=2,
        )
        proxy.on_request(ex)
        proxy.on_complete(ex)
        # As the proxy does with --shadow: the shadow's collector in the proxy's registry.
        shadow = ShadowMetrics(ShadowCounts(sent=1))
        proxy.registry.register(shadow)
        shadow.observe(ex)
        replay = ReplayMetrics(DispatchStats())
        replay.observe(
            Record(
                start_ns=0,
                path="/v1/chat/completions",
                model="m",
                status=500,
                stream=True,
                ttfb_ns=1,
                duration_ns=2,
                lag_ns=1,
                input_tokens=3,
                output_tokens=4,
            )
        )
        text = (generate_latest(proxy.registry) + generate_latest(replay.registry)).decode()
    finally:
        asyncio.run(recorder.close())
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}


def test_every_dashboard_query_names_an_exported_metric(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    exported = _exported(tmp_path)
    named = set()
    for expr in exprs:
        for name in re.findall(r"\b(tailreplay_[a-z_]+)\b", expr):
            named.add(name)
            assert name in exported, f"{name} (in {expr!r}) is not exported"
    # Both halves, and the proxy's shadow, are on the dashboard.
    assert any(n.startswith("tailreplay_proxy_") for n in named)
    assert any(n.startswith("tailreplay_proxy_shadow_") for n in named)
    assert any(n.startswith("tailreplay_replay_") for n in named)


def test_counters_exist_at_zero_and_buckets_are_dense() -> None:
    """A clean run's error panel reads 0 (not "no data"), and a P99 read off a histogram is
    within a step of at most 1.5x from 100 ms to 300 s."""
    replay = generate_latest(ReplayMetrics(DispatchStats()).registry).decode()
    assert (
        'tailreplay_replay_errors_total{model="none",route="/v1/chat/completions",status="5xx"} 0.0'
        in replay
    )
    proxy = generate_latest(ProxyMetrics().registry).decode()
    assert 'tailreplay_proxy_requests_total{route="/v1/completions",status="error"} 0.0' in proxy
    bounds = [b for b in LATENCY_BUCKETS if b >= 0.1]
    assert bounds[0] == 0.1 and bounds[-1] == 300
    assert max(b / a for a, b in itertools.pairwise(bounds)) <= 1.5 + 1e-9
