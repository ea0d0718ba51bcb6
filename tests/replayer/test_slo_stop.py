"""``replay --slo-stop``: a run stops once an objective is missed whatever the rest does,
and never before the report would say so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tailreplay.replayer.slo_stop import MissWatch, SloStop, Watched, enough_over, errors_over
from tailreplay.report.quantiles import estimates
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9


@pytest.mark.parametrize("total", [5, 20, 100, 630, 5000])
@pytest.mark.parametrize("quantile", [0.5, 0.95, 0.99])
def test_the_stop_comes_only_once_the_reports_interval_is_above_the_limit(
    total: int, quantile: float
) -> None:
    """With ``enough_over`` requests over the limit and every other one instant (the
    best the rest of the run could do), the report's 95% interval of the percentile is
    wholly above the limit: the verdict the stop anticipates."""
    over = enough_over(total, quantile)
    assert over is not None and over <= total
    values = np.zeros(total)
    values[:over] = 2.0  # limit 1
    estimate = estimates(values, {"q": quantile * 100})
    assert estimate is not None and estimate["q"].low is not None
    assert estimate["q"].value > 1.0 and estimate["q"].low > 1.0
    # One fewer is not always enough for the report: the stop waits for the count.
    values[over - 1] = 0.0
    if over - 1 < total * (1 - quantile):
        below = estimates(values, {"q": quantile * 100})
        assert below is not None and below["q"].value <= 1.0


def _result(duration_ms: float, error: str | None = None, status: int = 200) -> Record:
    return Record(start_ns=T0, duration_ns=round(duration_ms * 1e6),
                  ttfb_ns=round(duration_ms * 5e5), status=status, error=error,
                  stream=True)  # fmt: skip


def test_the_watch_counts_answers_over_the_limit_and_ignores_cancelled_ones() -> None:
    latency = Watched("latency:p99<=100ms", "latency", 0.99, 100.0)
    watch = MissWatch(SloStop([latency], after_sending=False), total=630)
    needed = enough_over(630, 0.99)
    assert needed == watch.needed[0]
    for _ in range(needed - 1):
        watch.observe(_result(150))
        watch.observe(_result(50))  # under the limit: not counted
        watch.observe(_result(500, error="cancelled"))  # its age is a bound, not an answer
        watch.observe(_result(500, status=503))  # a failure has no latency
    assert watch.reason is None and not watch.missed.is_set()
    watch.observe(_result(150))
    assert watch.missed.is_set()
    assert watch.reason == (f"latency:p99<=100ms was missed whatever the rest does: {needed} "
                            "requests over 100 ms, of 630 at most")  # fmt: skip


def test_the_error_rate_is_missed_once_the_errors_exceed_its_share_of_the_run() -> None:
    errors = Watched("error_rate<=1%", "error_rate", None, 0.01)
    watch = MissWatch(SloStop([errors], after_sending=False), total=1000)
    for _ in range(10):  # 1% of 1,000: still within
        watch.observe(_result(5, status=500))
    assert watch.reason is None
    watch.observe(_result(5, error="ClientConnectionError"))
    assert watch.reason == ("error_rate<=1% was missed whatever the rest does: 11 requests "
                            "failed, of 1,000 at most")  # fmt: skip


@pytest.mark.parametrize(
    ("total", "limit", "needed"),
    [(100, 0.29, 30), (100, 0.57, 58), (300, 0.41, 124), (1000, 0.01, 11), (10, 0.0, 1),
     (50, 1.0, 51), (0, 0.05, 1)],
)  # fmt: skip
def test_the_error_count_that_misses_a_rate_is_the_reports_own(
    total: int, limit: float, needed: int
) -> None:
    """As the report judges it (errors / requests <= limit passes), in floats: 0.29 * 100
    is 28.999..., and 29 errors of 100 still meet a 29% limit."""
    assert errors_over(total, limit) == needed
    if total:
        assert (needed - 1) / total <= limit < needed / total


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 requests over 6 s, far more than a 2-sequence simulator serves in time."""
    maps = [{"start_ns": T0 + i * 20_000_000, "input_tokens": 100, "output_tokens": 20,
             "stream": True, "path": "/v1/chat/completions"} for i in range(300)]  # fmt: skip
    return write_plain(tmp_path_factory.mktemp("stop") / "a.msgpack", maps)


def _replay(tmp: Path, archive: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out, summary = tmp / "r.msgpack", tmp / "s.json"
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", str(archive), "--out", str(out),
         "--json", str(summary), "--sim-profile", "fast", "--sim-arg=--max-num-seqs=2",
         "--tail-stretch", "1", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return done, json.loads(summary.read_text()) if summary.exists() else {}


def _records(path: Path) -> list[dict]:
    return list(ArchiveReader([path], order="file").iter_maps())


@pytest.mark.parametrize("when", ["now", "after-sending"])
def test_an_overloaded_run_stops_once_its_p99_is_missed(
    tmp_path: Path, burst: Path, when: str
) -> None:
    done, s = _replay(tmp_path, burst, "--slo", "latency:p99<=500ms", "--slo-stop", when)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = next(line for line in done.stderr.splitlines() if line.startswith("Error:"))
    assert last.startswith("Error: latency:p99<=500ms was missed whatever the rest does: ")
    assert last.endswith(" requests over 500 ms, of 300 at most; stopped (--slo-stop)")
    assert s["slo_stop"] in last and s["aborted"] == last.removeprefix("Error: ")
    cancelled = s["errors"].get("cancelled", 0)
    assert cancelled > 0  # a queue was still waiting
    if when == "now":
        assert s["unsent"] > 0 and s["sent"] + s["unsent"] == 300
        line = (f"--slo-stop: stopped after {s['due']} of 300 due, {s['unsent']} never sent; "
                f"{cancelled} in flight cancelled")  # fmt: skip
    else:
        assert s["sent"] == 300 and s["unsent"] == 0
        line = f"--slo-stop: stopped once all was sent; {cancelled} in flight cancelled"
    assert done.stdout.splitlines()[0] == line
    # What was answered over the limit is what the stop counted; each cancelled
    # request keeps how long it had been in flight.
    results = _records(tmp_path / "r.msgpack")
    assert len(results) == s["sent"]
    over = sum(1 for r in results if r.get("error") is None and r["duration_ns"] > 500e6)
    assert over >= enough_over(300, 0.99)
    ages = [r["duration_ns"] for r in results if r.get("error") == "cancelled"]
    assert len(ages) == cancelled and min(ages) >= 0 and max(ages) > 500e6


def test_a_run_that_meets_its_objectives_is_not_stopped(tmp_path: Path, burst: Path) -> None:
    # A lag limit no machine misses: a busy one would otherwise leave the SLO unjudged.
    done, s = _replay(tmp_path, burst, "--slo", "latency:p99<=60s", "--slo-stop", "now",
                      "--limit", "40", "--lag-limit", "10s")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "aborted" not in s and "slo_stop" not in s and s["sent"] == 40
    assert s["errors"] == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--slo-stop needs a --slo on latency, ttft or error_rate with a limit in ms or %"),
        (["--slo", "tpot:p99<=50ms"], "--slo-stop needs a --slo on latency"),
        (["--slo", "latency:p99<=1s", "--workers", "2"],
         "--slo-stop does not go with --shard or --workers: each process sees part of the run"),
        (["--slo", "latency:p99<=1s", "--retries", "policy"],
         "--slo-stop does not go with --retries policy"),
        (["--slo", "latency:p99<=1s*3,error_rate<=1%", "--slo-min-score", "0.7"],
         "--slo-stop does not go with --slo-min-score under 1: one objective missed may still "
         "pass"),
    ],
)  # fmt: skip
def test_a_stop_it_cannot_judge_is_refused(
    tmp_path: Path, burst: Path, args: list[str], message: str
) -> None:
    done, _ = _replay(tmp_path, burst, "--slo-stop", "now", *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_capacity_trial_cut_short_counts_its_cancelled_requests_as_lower_bounds(
    tmp_path: Path, burst: Path
) -> None:
    """``capacity`` judges a trial stopped after sending: the cancelled requests are
    not errors, their time in flight is their latency, and the verdict is a failure."""
    from tailreplay.report.capacity_result import Search, render
    from tailreplay.report.slo import parse_objectives
    from tailreplay.studies.capacity_judge import judge

    # As capacity runs a trial: it judges the results itself, so the replay does not.
    # A lag limit no machine misses: the cut, not this machine's load, is under test (a
    # busy machine made the trial "client-bound" rather than "fail").
    done, s = _replay(tmp_path, burst, "--slo", "latency:p99<=500ms", "--slo-stop",
                      "after-sending", "--no-slo-report", "--lag-limit", "10s")  # fmt: skip
    assert done.returncode == 1 and s["sent"] == 300
    assert "SLOs:" not in done.stdout and "replayed 300 requests" not in done.stdout
    cancelled = s["errors"]["cancelled"]
    results = tmp_path / "r.msgpack"
    trial = judge(4.0, [results], parse_objectives(["latency:p99<=500ms"]), None)
    assert trial.cut == cancelled and trial.verdict == "fail"
    assert trial.requests == 300 and trial.errors == 0 and trial.error_rate == 0
    # Goodput does not count a cut request as answered within the limit.
    assert trial.goodput is not None and trial.goodput <= (300 - cancelled) / 300
    ages = sorted(r["duration_ns"] / 1e6 for r in _records(results))  # every request's
    assert trial.percentiles["latency"]["p99"] == pytest.approx(np.percentile(ages, 99))
    assert trial.checks[0].verdict == "fail" and trial.checks[0].low > 500
    # Whether a cut request had its first token is not kept: its TTFT is left out.
    ttfts = [r["ttfb_ns"] / 1e6 for r in _records(results) if r.get("error") is None]
    assert trial.percentiles["ttft"]["p99"] == pytest.approx(np.percentile(ttfts, 99))
    lines = render(Search(trials=[trial], interval=(None, 4.0)))
    assert lines[1].endswith(f"fail (stopped: {cancelled:,} cut)")
    assert lines[2].startswith("stopped: once an objective was missed whatever the rest did")
