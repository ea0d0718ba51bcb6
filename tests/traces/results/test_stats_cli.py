"""`traces stats` against numpy, on archives written by a plain msgpack loop."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tests.helpers import random_maps, write_plain


def _pcts(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return dict(
        zip(("p50", "p95", "p99", "p999"), np.percentile(values, [50, 95, 99, 99.9]), strict=True)
    )


def _is_error(m: dict) -> bool:
    return "error" in m or m.get("status", 200) == 0 or m.get("status", 200) >= 400


def test_stats_json_equals_numpy(tmp_path: Path) -> None:
    maps = random_maps(3000)
    path = write_plain(tmp_path / "plain.msgpack", maps)
    result = CliRunner().invoke(cli, ["traces", "stats", "--json", str(path)])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)

    ok = [m for m in maps if not _is_error(m)]
    starts = [m["start_ns"] for m in maps]
    duration_s = (max(starts) - min(starts)) / 1e9
    assert got["records"] == 3000
    assert got["duration_s"] == pytest.approx(duration_s)
    assert got["rate_rps"] == pytest.approx(2999 / duration_s)
    assert got["error_rate"] == pytest.approx(sum(map(_is_error, maps)) / 3000)
    expected = {
        "latency_ms": _pcts([m["duration_ns"] / 1e6 for m in ok]),
        "ttft_ms": _pcts([m["ttfb_ns"] / 1e6 for m in ok if m["stream"]]),  # streamed only
        "tpot_ms": _pcts(
            [
                (m["duration_ns"] - m["ttfb_ns"]) / (m["output_tokens"] - 1) / 1e6
                for m in ok
                if m["stream"] and m["output_tokens"] > 1
            ]
        ),
        "input_tokens": _pcts([m["input_tokens"] for m in ok]),
        "output_tokens": _pcts([m["output_tokens"] for m in ok]),
    }
    for key, want in expected.items():
        assert want is not None
        assert got[key] == pytest.approx(want), key

    buckets = {b["range"]: b for b in got["buckets"]}
    assert list(buckets) == ["<50", "50-256", "256-512", "512-1024", "1024-2048", ">=2048"]
    assert sum(b["count"] for b in buckets.values()) == 3000
    mid = [m for m in maps if 512 <= m["input_tokens"] < 1024]
    mid_ok = [m["duration_ns"] / 1e6 for m in mid if not _is_error(m)]
    assert buckets["512-1024"]["count"] == len(mid)
    assert buckets["512-1024"]["latency_ms"] == pytest.approx(
        dict(zip(("p50", "p95", "p99"), np.percentile(mid_ok, [50, 95, 99]), strict=True))
    )
    rate = (len(maps) - 1) / duration_s
    assert buckets["512-1024"]["rate_rps"] == pytest.approx(rate * len(mid) / len(maps))
    assert sum(b["rate_rps"] for b in buckets.values()) == pytest.approx(got["rate_rps"])
    assert buckets["512-1024"]["error_rate"] == pytest.approx(sum(map(_is_error, mid)) / len(mid))


def test_stats_null_where_no_record_has_the_field(tmp_path: Path) -> None:
    # Imported traces (Azure) have arrivals and tokens only.
    maps = [
        {"start_ns": 10**18 + i * 10**9, "input_tokens": 100 + i, "output_tokens": 7}
        for i in range(5)
    ]
    path = write_plain(tmp_path / "a.msgpack", maps)
    result = CliRunner().invoke(cli, ["traces", "stats", "--json", str(path)])
    got = json.loads(result.stdout)
    assert got["latency_ms"] is None and got["ttft_ms"] is None and got["tpot_ms"] is None
    assert got["input_tokens"]["p50"] == 102.0
    assert got["error_rate"] == 0.0


def test_stats_custom_buckets_and_table(tmp_path: Path) -> None:
    path = write_plain(tmp_path / "a.msgpack", random_maps(200))
    result = CliRunner().invoke(cli, ["traces", "stats", "--buckets", "1000,3000", str(path)])
    assert result.exit_code == 0
    for label in ("<1000", "1000-3000", ">=3000", "latency ms", "TTFT ms", "TPOT ms"):
        assert label in result.stdout
    bad = CliRunner().invoke(cli, ["traces", "stats", "--buckets", "x", str(path)])
    assert bad.exit_code == 2
    assert "invalid --buckets" in bad.output
