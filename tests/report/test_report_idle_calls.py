"""Calls that generate nothing (an SDK's ``GET /v1/models``) are listed apart and not
judged: a slow model list must not fail an SLO set for generations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9


def _capture(path: Path) -> Path:
    maps: list[dict[str, Any]] = []
    for i in range(100):
        maps.append(
            {
                "start_ns": T0 + i * 10**8,
                "trace_id": i.to_bytes(16, "big"),
                "span_id": i.to_bytes(8, "big"),
                "method": "POST",
                "path": "/v1/chat/completions",
                "status": 200,
                "duration_ns": 5 * 10**8,
                "ttfb_ns": 10**8,
                "input_tokens": 300,
                "output_tokens": 20,
            }
        )
    for i in range(10):
        maps.append(
            {
                "start_ns": T0 + i * 10**9 + 1,
                "trace_id": (1000 + i).to_bytes(16, "big"),
                "span_id": i.to_bytes(8, "big"),
                "method": "GET",
                "path": "/v1/models?x=1",
                "status": 200,
                "duration_ns": 5 * 10**9,
            }
        )
    maps.sort(key=lambda m: m["start_ns"])
    return write_plain(path, maps, {"format": "tailreplay", "version": 1, "source": "proxy"})


def test_a_slow_model_list_is_listed_not_judged(tmp_path: Path) -> None:
    capture = _capture(tmp_path / "c.msgpack")
    out = tmp_path / "r.json"
    runner = CliRunner()
    result = runner.invoke(
        cli, ["report", str(capture), "--slo", "latency:p99<=1s", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["overall"]["replayed"]["requests"] == 100
    assert [b["range"] for b in report["buckets"]] == [
        "<50",
        "50-256",
        "256-512",
        "512-1024",
        "1024-2048",
        ">=2048",
    ]
    (row,) = report["idle"]["replayed"]
    assert (row["call"], row["requests"], row["errors"]) == ("GET /v1/models", 10, 0)
    assert row["latency_p99_ms"] == 5000.0
    assert "not judged: calls that generate nothing" in result.output
    # Asked for by path, every path is judged, the model list among them.
    judged = runner.invoke(
        cli, ["report", str(capture), "--slo", "latency:p99<=1s", "--slo-by", "path"]
    )
    assert judged.exit_code == 1, judged.output
    assert "/v1/models" in judged.output


def test_both_sides_list_their_calls_that_generate_nothing(tmp_path: Path) -> None:
    capture = _capture(tmp_path / "c.msgpack")
    replayed = []
    for m in ArchiveReader([capture]):
        ids = {"trace_id": b"r" * 16, "span_id": m.span_id, "orig_trace_id": m.trace_id}
        replayed.append(
            {
                **ids,
                "start_ns": m.start_ns,
                "orig_span_id": m.span_id,
                "lag_ns": 0,
                "method": m.method,
                "path": m.path,
                "status": 200,
                "duration_ns": m.duration_ns,
                "input_tokens": m.input_tokens,
                "output_tokens": m.output_tokens,
            }
        )
    results = write_plain(
        tmp_path / "r.msgpack", replayed, {"format": "tailreplay", "version": 1, "source": "replay"}
    )
    out = tmp_path / "r.json"
    args = ["report", str(results), "--recorded", str(capture), "--json", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    idle = json.loads(out.read_text())["idle"]
    assert [r["requests"] for r in idle["recorded"]] == [10]
    assert [r["requests"] for r in idle["replayed"]] == [10]


def test_requests_the_client_cut_are_not_the_targets_errors(tmp_path: Path) -> None:
    # Ctrl-C cut 5 requests in flight; the target failed 1 of the 11 it answered.
    maps = [
        {
            "start_ns": T0 + i * 10**8,
            "trace_id": i.to_bytes(16, "big"),
            "span_id": i.to_bytes(8, "big"),
            "method": "POST",
            "path": "/v1/chat/completions",
            "lag_ns": 0,
            "duration_ns": 2 * 10**8,
            "input_tokens": 100,
            "output_tokens": 10,
            **({"status": 200} if i < 10 else {}),
            **({"error": "cancelled"} if 10 <= i < 15 else {}),
            **({"status": 500, "error": "http_500"} if i == 15 else {}),
        }
        for i in range(16)
    ]
    header = {"format": "tailreplay", "version": 1, "source": "replay"}
    results = write_plain(tmp_path / "r.msgpack", maps, header)
    out = tmp_path / "r.json"
    runner = CliRunner()
    args = ["report", str(results), "--replay-only", "--json", str(out)]
    result = runner.invoke(cli, [*args, "--slo", "error_rate<=10%"])
    assert result.exit_code == 0, result.output
    overall = json.loads(out.read_text())["overall"]["replayed"]
    assert (overall["errors"], overall["cancelled"]) == (1, 5)
    assert overall["error_rate"] == 1 / 11
    assert "cancelled by the client" in result.output
    assert runner.invoke(cli, [*args, "--slo", "error_rate<=5%"]).exit_code == 1


def test_stats_and_report_give_the_same_figures_without_the_model_lists(tmp_path: Path) -> None:
    # The model lists take 5 s each: in stats' percentiles, they would move the P99.
    capture = _capture(tmp_path / "c.msgpack")
    runner = CliRunner()
    out = tmp_path / "r.json"
    assert runner.invoke(cli, ["report", str(capture), "--json", str(out)]).exit_code == 0
    report = json.loads(out.read_text())["overall"]["replayed"]
    result = runner.invoke(cli, ["traces", "stats", str(capture), "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["records"] == 110
    assert stats["idle_calls"] == {"GET /v1/models": 10}
    assert stats["latency_ms"]["p99"] == report["metrics"]["latency"]["p99"]["value"] == 500.0
    assert sum(b["count"] for b in stats["buckets"]) == 100
    shown = runner.invoke(cli, ["traces", "stats", str(capture)])
    assert "calls that generate nothing 10 (GET /v1/models 10)" in shown.output


def test_stats_counts_what_the_client_cut_apart_from_errors(tmp_path: Path) -> None:
    # The same 16 results as above: stats and report give one error rate, 1 in 11.
    maps = [
        {
            "start_ns": T0 + i * 10**8,
            "method": "POST",
            "path": "/v1/chat/completions",
            "duration_ns": 2 * 10**8,
            "input_tokens": 100,
            **({"status": 200} if i < 10 else {}),
            **({"error": "cancelled"} if 10 <= i < 15 else {}),
            **({"status": 500, "error": "http_500"} if i == 15 else {}),
        }
        for i in range(16)
    ]
    path = write_plain(tmp_path / "r.msgpack", maps, {"format": "tailreplay", "version": 1})
    result = CliRunner().invoke(cli, ["traces", "stats", str(path), "--json"])
    stats = json.loads(result.stdout)
    assert (stats["cancelled"], stats["error_rate"]) == (5, 1 / 11)
    (bucket,) = [b for b in stats["buckets"] if b["count"]]
    assert bucket["error_rate"] == 1 / 11


def test_a_mooncake_export_holds_the_generations_only(tmp_path: Path) -> None:
    capture = _capture(tmp_path / "c.msgpack")
    out = tmp_path / "m.jsonl"
    result = CliRunner().invoke(cli, ["traces", "export", "mooncake", str(capture), "-o", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 100 and all(line["input_length"] == 300 for line in lines)
    assert "exported 100 records" in result.output
    assert "(10 calls that generate nothing left out)" in result.output
