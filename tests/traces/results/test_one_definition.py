"""Every view of the same records gives the same figures: `traces stats`, `report` and the
replay's summary read one set of definitions (tailreplay.traces.results.figures)."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.replayer.summary import ResultCollector
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9
HEADER = {"format": "tailreplay", "version": 1, "source": "replay", "created_ns": T0}


def _mixed(n: int, seed: int = 5) -> list[dict[str, Any]]:
    """Replay results of every kind: streamed or not, reasoning first or not, failed in
    every way, cut by the client, with fields absent and fields written as nil, and slow
    model lists among them (calls that generate nothing: in no view's figures)."""
    rng = random.Random(seed)
    maps = []
    for i in range(n):
        stream = rng.random() < 0.6
        duration = rng.randint(50, 5000) * 10**6
        m: dict[str, Any] = {
            "start_ns": T0 + i * 10**7,
            "orig_trace_id": rng.randbytes(16),
            "orig_span_id": rng.randbytes(8),
            "duration_ns": duration,
            "ttfb_ns": rng.randint(5, 40) * duration // 100,
            "status": 200,
            "stream": stream,
            "input_tokens": rng.randint(10, 3000),
            "output_tokens": rng.randint(1, 400),
            "lag_ns": rng.randint(0, 3 * 10**6),
            "sent_ns": T0 + i * 10**7,
            "tokens_source": "estimate" if i % 4 == 0 else "usage",
            "method": "POST",
            "path": "/v1/chat/completions",
        }
        if stream and rng.random() < 0.3:  # a reasoning model: the answer came later
            m["ttft_content_ns"] = m["ttfb_ns"] + (duration - m["ttfb_ns"]) // 3
        roll = rng.random()
        if roll < 0.04:
            m["status"] = 503
        elif roll < 0.07:
            m["status"], m["error"] = 0, "reset"
        elif roll < 0.09:
            m["error"] = "bad_response"  # a 200 whose body broke the API
        elif roll < 0.15:
            m["error"] = None  # nil: absent, so a success
        if rng.random() < 0.05:
            m["ttft_content_ns"] = None
        _rare(i, m)
        maps.append(m)
    return maps


def _rare(i: int, m: dict[str, Any]) -> None:
    """The kinds one request in 20 or 50 has."""
    if i % 50 == 3:
        m["status"], m["error"] = 0, "cancelled"
    if i % 50 == 13:  # never sent: no slot under --max-inflight
        m["status"], m["error"] = 0, "dropped"
        for name in ("sent_ns", "lag_ns", "duration_ns", "ttfb_ns", "ttft_content_ns"):
            m.pop(name, None)
    if i % 50 == 23:  # a log's quirk: the first token after the end
        m.update(ttfb_ns=m["duration_ns"] + 10**6, stream=True, output_tokens=50)
        m.pop("ttft_content_ns", None)
    if i % 20 == 7:
        m.update(method="GET", path="/v1/models", duration_ns=9 * 10**9, stream=False)


def _json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = write_plain(tmp_path_factory.mktemp("mixed") / "r.msgpack", _mixed(2000), HEADER)
    stats = _json("traces", "stats", "--json", str(path))
    out = path.with_suffix(".json")
    CliRunner().invoke(cli, ["report", "--replay-only", "--json", str(out), str(path)])
    report = json.loads(out.read_text())["overall"]["replayed"]
    collector = ResultCollector(tail_stretch=1.8, tail_quantile=0.99)
    for record in ArchiveReader([path]):
        collector.add(record)
    summary = collector.summary(sent=2000, dropped=0).to_json()
    return {"stats": stats, "report": report, "summary": summary}


@pytest.mark.parametrize("metric", ["latency", "latency_from_due", "ttft", "ttft_content", "tpot"])
def test_stats_report_and_replay_summary_agree(views: dict[str, Any], metric: str) -> None:
    stats = views["stats"][f"{metric}_ms"]
    report = {q: e["value"] for q, e in views["report"]["metrics"][metric].items()}
    summary = views["summary"][f"{metric}_ms"]
    assert stats is not None and summary is not None
    assert report == pytest.approx(stats)
    for q in ("p50", "p95", "p99"):
        assert summary[q] == pytest.approx(stats[q])


def _failed(m: dict[str, Any]) -> bool:
    return m.get("error") is not None or m["status"] == 0 or m["status"] >= 400


def test_the_error_rate_and_the_counts_agree(views: dict[str, Any]) -> None:
    maps = [m for m in _mixed(2000) if m["method"] == "POST"]
    cut = sum(m.get("error") == "cancelled" for m in maps)
    failed = sum(_failed(m) for m in maps) - cut
    dropped = sum(m.get("error") == "dropped" for m in maps)
    assert len(maps) == 1900 and cut == dropped == 40 and 190 < failed < 290  # every kind
    assert views["stats"]["error_rate"] == pytest.approx(failed / (1900 - cut))
    assert views["report"]["error_rate"] == pytest.approx(failed / (1900 - cut))
    assert views["stats"]["cancelled"] == views["report"]["cancelled"] == cut
    errors = views["summary"]["errors"]
    assert errors.pop("cancelled") == cut and sum(errors.values()) == failed
    assert errors["dropped"] == dropped  # an error of its own kind in every view
    assert views["summary"]["completed"] == 1900 - failed - cut
    assert views["report"]["requests"] == views["summary"]["requests"] == 1900
    assert views["summary"]["idle_calls"] == views["stats"]["idle_calls"] == {"GET /v1/models": 100}
    assert views["report"]["estimated_share"] == 500 / 1900  # counted, not reported


def test_ttft_counts_streamed_answers_only(views: dict[str, Any]) -> None:
    maps = [m for m in _mixed(2000) if m.get("error") is None and m["status"] == 200]
    streamed = [m["ttfb_ns"] / 1e6 for m in maps if m["stream"]]
    want = np.percentile(streamed, [50, 95, 99, 99.9])
    got = views["stats"]["ttft_ms"]
    assert [got["p50"], got["p95"], got["p99"], got["p999"]] == pytest.approx(list(want))


def test_tpot_is_never_negative_a_ttft_after_the_end_has_none(views: dict[str, Any]) -> None:
    maps = [m for m in _mixed(2000) if m.get("error") is None and m["status"] == 200]
    quirks = [m for m in maps if m["stream"] and m["ttfb_ns"] > m["duration_ns"]]
    tpot = [
        (m["duration_ns"] - m["ttfb_ns"]) / (m["output_tokens"] - 1) / 1e6
        for m in maps
        if m["stream"] and m["output_tokens"] > 1 and m["ttfb_ns"] <= m["duration_ns"]
    ]
    want = np.percentile(tpot, [50, 95, 99, 99.9])
    got = views["stats"]["tpot_ms"]
    assert len(quirks) >= 30
    assert [got["p50"], got["p95"], got["p99"], got["p999"]] == pytest.approx(list(want))
