"""SLOs per class and per window: a run that passes overall fails where one model, or
one minute, missed; each scope's rows, goodput and spread are in the report."""

from __future__ import annotations

import json
import random
from pathlib import Path

from click.testing import CliRunner

from tailreplay.cli import cli
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9


def _results(path: Path) -> Path:
    """120 s of results at 10 req/s: model a answers in ~100 ms, model b (one request in
    ten) in ~2 s; from 60 s to 70 s every request takes ~3 s."""
    rng = random.Random(4)
    maps = []
    for i in range(1200):
        t = i / 10
        model = "b" if i % 10 == 0 else "a"
        ms = 2000 if model == "b" else 100
        if 60 <= t < 70:
            ms = 3000
        maps.append({"start_ns": T0 + int(t * 1e9), "trace_id": rng.randbytes(16),
                     "span_id": rng.randbytes(8), "model": model,
                     "path": "/v1/chat/completions?x=1" if i % 2 else "/v1/chat/completions",
                     "status": 200, "duration_ns": int(ms * rng.uniform(0.9, 1.1) * 1e6),
                     "input_tokens": 100, "output_tokens": 10})  # fmt: skip
    return write_plain(path, maps)


def _report(tmp_path: Path, *args: str) -> tuple[int, str, dict]:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["report", str(_results(tmp_path / "res.msgpack")),
                                      "--replay-only", "--json", str(out), *args])  # fmt: skip
    return result.exit_code, result.output, json.loads(out.read_text())


def test_a_class_that_misses_fails_a_run_that_passes_overall(tmp_path: Path) -> None:
    code, output, report = _report(tmp_path, "--slo", "latency:p50<=500ms", "--slo-by", "model")
    slo = report["slo"]
    assert slo["rows"][0]["cells"]["overall"]["ok"] is True  # the median request is model a's
    (scope,) = slo["scopes"]
    rows = {r["scope"]: r for r in scope["rows"]}
    assert rows["model=a"]["passed"] is True and rows["model=b"]["passed"] is False
    assert rows["model=b"]["requests"] == 120 and scope["failed"] == ["model=b"]
    # goodput: model b's requests all take ~2 s or more, none within 500 ms
    assert rows["model=b"]["goodput"] == 0.0 and rows["model=a"]["goodput"] > 0.9
    assert slo["passed"] is False and code == 1
    assert "SLO failed: by model: model=b" in output and "SLO by model" in output


def test_paths_are_classed_without_their_query(tmp_path: Path) -> None:
    _, _, report = _report(tmp_path, "--slo", "latency:p99<=10s", "--slo-by", "path")
    (scope,) = report["slo"]["scopes"]
    assert [r["scope"] for r in scope["rows"]] == ["path=/v1/chat/completions"]
    assert scope["passed"] is True


def test_every_window_must_pass_and_the_spread_is_reported(tmp_path: Path) -> None:
    code, output, report = _report(tmp_path, "--slo", "latency:p50<=500ms",
                                   "--slo-window", "10s")  # fmt: skip
    (scope,) = report["slo"]["scopes"]
    assert len(scope["rows"]) == 12 and scope["failed"] == ["60-70 s"]
    low, high = scope["spread"]["latency:p50<=500ms"]
    assert 90 < low < 110 and 2700 < high < 3300
    assert code == 1 and "per 10 s window: 60-70 s" in output


def test_windows_too_small_to_judge_are_shown_and_judge_nothing(tmp_path: Path) -> None:
    code, output, report = _report(tmp_path, "--slo", "latency:p50<=5s", "--slo-window", "1s")
    rows = report["slo"]["scopes"][0]["rows"]
    assert all(r["passed"] is None and r["requests"] == 10 for r in rows)
    # A run whose every window was too small to judge has not shown it meets the SLO.
    assert report["slo"]["passed"] is False and code == 1
    assert "none of 120 had 20 requests to judge" in output


def test_p99_one_bad_minute_and_one_small_slow_model_fail_a_passing_run(tmp_path: Path) -> None:
    # Five minutes at 10 req/s, ~100 ms. In the middle minute 2% of requests take 3 s
    # (0.4% of the run: its P99 passes); model b, one request in 300, takes 2 s.
    rng = random.Random(9)
    maps = []
    for i in range(3000):
        t = i / 10
        model = "b" if i % 300 == 7 else "a"
        ms = 2000 if model == "b" else 100
        if 120 <= t < 180 and i % 50 == 0:
            ms = 3000
        maps.append({"start_ns": T0 + int(t * 1e9), "trace_id": rng.randbytes(16),
                     "span_id": rng.randbytes(8), "model": model, "status": 200,
                     "duration_ns": int(ms * rng.uniform(0.95, 1.05) * 1e6)})  # fmt: skip
    results = write_plain(tmp_path / "five.msgpack", maps)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["report", str(results), "--replay-only", "--json", str(out),
                                      "--slo", "latency:p99<=1000ms", "--slo-window", "1m",
                                      "--slo-by", "model"])  # fmt: skip
    slo = json.loads(out.read_text())["slo"]
    assert slo["rows"][0]["cells"]["overall"]["ok"] is True
    by_model, by_window = slo["scopes"]
    assert by_model["failed"] == ["model=b"] and by_window["failed"] == ["120-180 s"]
    assert result.exit_code == 1


def test_the_gate_verdict_names_the_class_that_missed(tmp_path: Path) -> None:
    """``replay --json``'s ``slo``: a run that passes overall and fails by class says
    which class, not only that it failed."""
    from tailreplay.report.slo import parse_objectives
    from tailreplay.report.write import ReportOptions, slo_verdict, write_report

    options = ReportOptions(replayed=[_results(tmp_path / "res.msgpack")], recorded=[],
                            objectives=parse_objectives(["latency:p50<=500ms"]),
                            slo_by="model")  # fmt: skip
    verdict = slo_verdict(write_report(options))
    assert verdict is not None and verdict["passed"] is False and verdict["missed"] == []
    assert verdict["failed"] == {"by model": ["model=b"]}


def test_a_window_too_small_or_too_large_for_the_run_is_a_usage_error(tmp_path: Path) -> None:
    """120 s cut into 1 µs windows would be 10^8 rows (a report that never ends); a
    window of 99999999h is one window, not an overflow."""
    runner = CliRunner()
    results = str(_results(tmp_path / "res.msgpack"))
    base = ["report", results, "--replay-only", "--slo", "latency:p50<=5s"]
    tiny = runner.invoke(cli, [*base, "--slo-window", "1us"])
    assert tiny.exit_code == 2 and "makes over 10,000 windows" in tiny.stderr, tiny.output
    assert "give at least 11.99ms" in tiny.stderr and tiny.stderr.count("\n") == 1
    zero = runner.invoke(cli, [*base, "--slo-window", "0s"])
    assert zero.exit_code == 2 and "give a duration above 0" in zero.stderr
    huge = runner.invoke(cli, [*base, "--slo-window", "99999999h", "--json", str(tmp_path / "h")])
    (scope,) = json.loads((tmp_path / "h").read_text())["slo"]["scopes"]
    assert huge.exit_code == 0 and [r["requests"] for r in scope["rows"]] == [1200]
