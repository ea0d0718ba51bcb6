"""``capacity``: the search (on a target whose limit is known) and a real run against
the built-in simulator."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tailreplay.report.capacity_result import Check, Trial, Verdict, plot, render, to_json
from tailreplay.studies.capacity_search import search
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import UNBOUND, write_plain

T0 = 1_700_000_000 * 10**9


def _trial(factor: float, runs: int, verdict: Verdict, limit: float) -> Trial:
    # The objective's value crosses its limit at ``limit`` (value proportional to factor).
    check = Check("latency:p99<=1000ms", 1000.0 * factor / limit, None, None, 1000.0, verdict)
    return Trial(factor, runs, 100, 0, 0.0, 10.0, 1.0, {}, [check], verdict)


def _limit_at(
    limit: float, *, uncertain_band: float = 0.0, client_from: float = 1e9, coarse_limit=None
):
    """A target that passes up to ``limit`` and fails above it (coarse trials up to
    ``coarse_limit``, default the same); within the band around it one full run is
    uncertain and two pooled decide; from ``client_from`` the client lags."""
    calls: list[tuple[float, int, bool]] = []
    coarse_at = coarse_limit or limit

    def run(factor: float, attempt: int, coarse: bool) -> Path:
        calls.append((factor, attempt, coarse))
        return Path(f"{factor}-{attempt}-{coarse}")

    def judge(factor: float, runs: list[Path]) -> Trial:
        coarse = runs[0].name.endswith("True")
        edge = coarse_at if coarse else limit
        if factor >= client_from:
            return _trial(factor, len(runs), "client-bound", edge)
        if not coarse and abs(factor / limit - 1) < uncertain_band and len(runs) == 1:
            return _trial(factor, len(runs), "uncertain", edge)
        return _trial(factor, len(runs), "pass" if factor <= edge else "fail", edge)

    return run, judge, calls


def _within(lo: float, hi: float, precision: float) -> bool:
    """A step of exactly the precision counts, whatever the float rounding."""
    return hi / lo <= (1 + precision) * (1 + 1e-9)


def _full(calls: list[tuple[float, int, bool]]) -> list[float]:
    return [f for f, _, coarse in calls if not coarse]


@pytest.mark.parametrize("limit", [1.3, 2.7, 5.3, 11.0])
def test_coarse_trials_aim_and_full_trials_decide(limit: float) -> None:
    run, judge, calls = _limit_at(limit)
    result = search(run, judge, max_factor=16, precision=0.05)
    lo, hi = result.interval
    assert lo is not None and hi is not None and lo <= limit < hi and _within(lo, hi, 0.05)
    assert result.capacity == lo and result.broke_first == "latency:p99<=1000ms"
    # Coarse trials start at 2x and double (or halve); from 4x they hold the whole
    # window, and count as full ones.
    assert calls[:2] == (
        [(2, 0, True), (1, 0, True)] if limit < 2 else [(2, 0, True), (4, 0, False)]
    )
    # Doubling to the first failure, then the bracket puts the limit where it is:
    # at most three more replays settle it.
    doubling = 2 + max(0, math.ceil(math.log2(limit / 4)))
    assert len(calls) <= doubling + 3, calls
    assert all(not t.coarse for t in result.trials if t.factor in (lo, hi))


def test_a_coarse_bracket_that_misleads_costs_replays_not_the_answer() -> None:
    # Coarse replays are short, so queues build less: they pass at 3x the real limit.
    run, judge, calls = _limit_at(3.0, coarse_limit=9.0)
    result = search(run, judge, max_factor=16, precision=0.05)
    lo, hi = result.interval
    assert lo is not None and hi is not None and lo <= 3.0 < hi and _within(lo, hi, 0.05)
    assert len(_full(calls)) <= 5, _full(calls)


def test_a_target_below_1x_is_searched_downwards() -> None:
    run, judge, _ = _limit_at(0.3)
    result = search(run, judge, max_factor=16, precision=0.1)
    lo, hi = result.interval
    assert lo is not None and hi is not None and lo <= 0.3 < hi


def test_a_target_that_fails_at_the_min_is_reported_below_it_without_going_lower() -> None:
    """A full trial at factor f lasts the window's span over f: the search never goes
    under --min (at 1/16 of a 5-minute window, one trial would last 80 minutes)."""
    run, judge, calls = _limit_at(0.05)
    result = search(run, judge, max_factor=16, min_factor=0.25, precision=0.1)
    assert min(f for f, _, _ in calls) == 0.25
    assert result.capacity is None and result.interval == (None, 0.25)
    assert _full(calls) == [0.25]  # the coarse halving, then one full trial at the floor
    assert "capacity: below 0.25x (the lowest factor tried did not pass)" in render(result)


def test_a_target_past_the_max_passes_at_it() -> None:
    run, judge, calls = _limit_at(100)
    result = search(run, judge, max_factor=8, precision=0.05)
    assert result.capacity == 8 and result.interval == (8, None) and result.broke_first is None
    assert _full(calls) == [4, 8]  # from 4x the doubling replays the whole window


def test_an_uncertain_full_trial_is_replayed_and_judged_pooled() -> None:
    run, judge, _ = _limit_at(4.0, uncertain_band=0.03)
    result = search(run, judge, max_factor=16, precision=0.05)
    pooled = [t for t in result.trials if not t.coarse and t.runs == 2]
    assert pooled and all(abs(t.factor / 4 - 1) < 0.03 for t in pooled)
    assert result.interval[0] is not None and result.interval[0] <= 4.0


def test_a_client_bound_trial_stops_the_search_without_a_claim_past_it() -> None:
    run, judge, _ = _limit_at(100, client_from=4)
    result = search(run, judge, max_factor=16, precision=0.05)
    assert result.stopped is not None and "client" in result.stopped
    assert result.capacity is None or result.capacity < 4


@pytest.mark.parametrize("client_from", [1.0, 4.0])
def test_a_search_stopped_before_any_full_verdict_claims_nothing(client_from: float) -> None:
    # The client lags from the first trial (or the first full one, at 4x): no full
    # replay passed or failed, and every view says so rather than failing to print.
    run, judge, _ = _limit_at(100, client_from=client_from)
    result = search(run, judge, max_factor=16, precision=0.05)
    assert result.stopped is not None and result.capacity is None
    lines = render(result)
    # From 4x the coarse 2x trial had passed: said, as what did pass.
    passed = " (the coarse trial at 2x passed, which only aims the full ones)"
    assert (
        "capacity: not measured (no full replay passed or failed)"
        + (passed if client_from == 4.0 else "")
    ) in lines
    assert any(line.startswith("stopped: the client was the bottleneck") for line in lines)
    assert to_json(result)["capacity"] is None
    assert "P99 against the load factor" in plot(result)


def test_the_search_is_bounded_in_replays() -> None:
    run, judge, calls = _limit_at(5.3)
    search(run, judge, max_factor=16, precision=1e-9)
    assert len(calls) <= 24


def _soft_target(limit: float, order: float, half_width: float):
    """A target whose P99 grows as factor^order, crossing its limit at ``limit``, measured
    with a log-interval of ``half_width`` each side of the value (narrowing as
    sqrt(1/runs) when runs are pooled): judged on the interval, as ``judge`` does."""
    calls: list[tuple[float, int, bool]] = []

    def run(factor: float, attempt: int, coarse: bool) -> Path:
        calls.append((factor, attempt, coarse))
        return Path(f"{factor}-{attempt}-{coarse}")

    def judge(factor: float, runs: list[Path]) -> Trial:
        value = 1000.0 * (factor / limit) ** order
        w = half_width / len(runs) ** 0.5
        low, high = value * math.exp(-w), value * math.exp(w)
        verdict: Verdict = "pass" if high <= 1000 else "fail" if low > 1000 else "uncertain"
        check = Check("latency:p99<=1000ms", value, low, high, 1000.0, verdict)
        return Trial(factor, len(runs), 100, 0, 0.0, 10.0, 1.0, {}, [check], verdict)

    return run, judge, calls


def test_an_uncertain_trial_at_its_limit_is_not_replayed_in_vain() -> None:
    # A soft knee (P99 ~ factor^0.8) measured to +-25%: trials within ~30% of the limit
    # are uncertain, and pooling two runs cannot decide one sitting near it.
    run, judge, calls = _soft_target(2.0, order=0.8, half_width=0.25)
    result = search(run, judge, max_factor=16, precision=0.05, repeats=1)
    repeated = [t for t in result.trials if t.runs > 1]
    for t in repeated:  # only those far enough from the limit for pooling to decide
        assert abs(math.log(t.checks[0].value / 1000)) > 0.25 * math.sqrt(0.5)
    lo, hi = result.interval
    assert lo is not None and hi is not None and lo <= 2.0
    top = next(t for t in result.trials if t.factor == hi and not t.coarse)
    assert hi >= 2.0 or top.verdict == "uncertain"  # not shown to pass is not a failure
    # It stops where the window's resolution does, says so, and spends few replays.
    assert result.note is not None and "resolves the factor" in result.note
    assert len(_full(calls)) <= 6, _full(calls)


def test_an_error_rate_at_zero_does_not_change_where_trials_are_aimed() -> None:
    # An error-rate objective with no errors has no log to scale: the aims come from the
    # latency objective alone, with it or without it.
    def searched(with_errors: bool) -> list[tuple[float, int, bool]]:
        run, judge, calls = _soft_target(2.7, order=3.0, half_width=0.15)

        def judged(factor: float, runs: list[Path]) -> Trial:
            t = judge(factor, runs)
            if with_errors:
                t.checks.append(Check("error_rate<=1%", 0.0, None, None, 0.01, "pass"))
            return t

        search(run, judged, max_factor=16, precision=0.1, repeats=1)
        return calls

    assert searched(with_errors=True) == searched(with_errors=False)


def test_a_sharp_knee_is_pinned_to_the_precision() -> None:
    # A queue past the limit: P99 ~ factor^8, measured to +-10%: decisive close to it.
    run, judge, calls = _soft_target(3.3, order=8.0, half_width=0.1)
    result = search(run, judge, max_factor=16, precision=0.05, repeats=1)
    lo, hi = result.interval
    assert lo is not None and hi is not None and lo <= 3.3 <= hi * 1.001 and _within(lo, hi, 0.05)
    assert result.note is None
    assert len(_full(calls)) <= 6, _full(calls)


def _queue(knee: float):
    """A queue that answers at its own rate: up to ``knee`` it keeps up and passes;
    past it, it answers ``knee / factor`` of what it is sent, and its trials are cut
    (values lower bounds, at most 1.3 times the limit: as if the run stopped once
    missed) and fail."""
    calls: list[tuple[float, int, bool]] = []

    def run(factor: float, attempt: int, coarse: bool) -> Path:
        calls.append((factor, attempt, coarse))
        return Path(f"{factor}-{attempt}-{coarse}")

    def judge(factor: float, runs: list[Path]) -> Trial:
        over = factor > knee
        value = 1300.0 if over else 400.0 * factor / knee
        verdict: Verdict = "fail" if over else "pass"
        check = Check("latency:p99<=1000ms", value, value * 0.9, value * 1.1, 1000.0, verdict)
        served = knee / factor if over else 1.0
        return Trial(factor, len(runs), 100, 0, 0.0, 10.0, 1.0, {}, [check], verdict,
                     cut=20 if over else 0, served=served)  # fmt: skip

    return run, judge, calls


def test_a_cut_failure_aims_at_the_rate_the_target_kept_up_with() -> None:
    # Interpolated on the 4x trial's lower bound, the first full aim would be 3.1x; the
    # share it answered (2.6 / 4) puts it at the knee.
    run, judge, calls = _queue(2.6)
    result = search(run, judge, max_factor=16, precision=0.1)
    lo, hi = result.interval
    assert lo is not None and hi is not None and lo <= 2.6 < hi and _within(lo, hi, 0.1)
    assert _full(calls)[:2] == [4, pytest.approx(2.6)]
    assert len(_full(calls)) <= 3, _full(calls)


def _finite_queue(knee: float, span_s: float, at_knee_ms: float):
    """A queue over a window of ``span_s`` (at 1x): up to ``knee`` the P99 rises to
    ``at_knee_ms``; past it the queue grows for the whole replay, the last requests
    waiting (f / knee - 1) * span / f longer. Failures are cut (their value a lower
    bound, at most 1.3 times the limit); the interval is +-5%."""
    calls: list[tuple[float, int, bool]] = []

    def run(factor: float, attempt: int, coarse: bool) -> Path:
        calls.append((factor, attempt, coarse))
        return Path(f"{factor}-{attempt}-{coarse}")

    def judge(factor: float, runs: list[Path]) -> Trial:
        coarse = runs[0].name.endswith("True")
        span = span_s * (0.25 * factor if coarse else 1)
        waited_s = max(factor / knee - 1, 0) * span / factor
        value = min(at_knee_ms * min(factor / knee, 1) + 1000 * waited_s, 3900.0)
        low, high = value * 0.95, value * 1.05
        verdict: Verdict = "pass" if high <= 3000 else "fail" if low > 3000 else "uncertain"
        check = Check("latency:p99<=3000ms", value, low, high, 3000.0, verdict)
        return Trial(factor, len(runs), 600, 0, 0.0, 10.0, 1.0, {}, [check], verdict,
                     cut=20 if verdict == "fail" else 0, served=min(1.0, knee / factor),
                     sending_s=span / factor)  # fmt: skip

    return run, judge, calls


@pytest.mark.parametrize("at_knee_ms", [1000.0, 1900.0])
def test_past_a_knee_a_short_window_holds_more_and_the_aim_counts_it(at_knee_ms: float) -> None:
    # The benchmark's queue: knee 2.28x, 30 s; with 1.9 s at the knee, the limit is met
    # up to 1 / (1 / 2.28 - 1.1 / 30) = 2.49x, past the knee; with 1 s, to 2.69x.
    run, judge, calls = _finite_queue(2.28, 30.0, at_knee_ms)
    capacity = 1 / (1 / 2.28 - (3 - at_knee_ms / 1000) / 30)
    result = search(run, judge, max_factor=16, precision=0.1)
    lo, hi = result.interval
    assert lo is not None and hi is not None and lo <= capacity < hi and _within(lo, hi, 0.1)
    assert len(_full(calls)) <= 3, _full(calls)


def test_served_share_is_the_answer_rate_over_the_send_rate(tmp_path: Path) -> None:
    """From real result records: a FIFO server at 60/s sent 100/s answers 0.6 of it in
    the second half of the sending; one at 200/s keeps up."""
    from tailreplay.report.side import load_side
    from tailreplay.studies.capacity_judge import served_share

    def replayed(rate_out: float) -> float | None:
        maps, free = [], 0.0
        for i in range(1000):  # 100/s for 10 s
            sent = i / 100
            free = max(free, sent) + 1 / rate_out
            at = T0 + int(sent * 1e9)
            maps.append({"start_ns": at, "duration_ns": int((free - sent) * 1e9),
                         "trace_id": random.Random(i).randbytes(16), "span_id": bytes(8),
                         "method": "POST", "path": "/v1/chat/completions", "status": 200,
                         "sent_ns": at, "intended_ns": at})  # fmt: skip
        path = write_plain(tmp_path / f"{rate_out}.msgpack", maps)
        return served_share(load_side([path]))

    assert replayed(60) == pytest.approx(0.6, abs=0.02)
    assert replayed(200) == pytest.approx(1.0, abs=0.02)


def _window(tmp_path: Path, span_s: float) -> tuple[Path, int]:
    """Poisson arrivals at 20/s for ``span_s`` (streamed chats of 100-1,500 tokens in,
    10-60 out): the archive and its count."""
    rng = random.Random(1)
    t, maps = 0.0, []
    while (t := t + rng.expovariate(20)) < span_s:
        maps.append({"start_ns": T0 + int(t * 1e9), "trace_id": rng.randbytes(16),
                     "span_id": rng.randbytes(8), "method": "POST",
                     "path": "/v1/chat/completions", "model": "m", "stream": True,
                     "input_tokens": rng.randint(100, 1500),
                     "output_tokens": rng.randint(10, 60)})  # fmt: skip
    return write_plain(tmp_path / "a.msgpack", maps), len(maps)


def _capacity(
    archive: Path,
    out: Path,
    *extra: str,
    slo: str = "latency:p99<=1500ms",
    max_factor: str = "8x",
    lag_limit: str = "100ms",
) -> subprocess.CompletedProcess[str]:
    """One ``capacity`` run on fresh built-in simulators, its JSON and plot in ``out``."""
    # The subject is the search on a real target: a lag limit generous enough that the
    # replayer is not what is measured at these few hundred req/s.
    return subprocess.run(
        [sys.executable, "-m", "tailreplay", "capacity", str(archive), "--sim-profile", "fast",
         "--slo", slo, "--window", "1h", "--max", max_factor, "--precision", "10%",
         "--lag-limit", lag_limit, "--out-dir", str(out), "--json", str(out / "cap.json"),
         "--plot", str(out / "cap.svg"), "--require", "1x", *extra],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def test_a_search_on_fresh_simulators_reports_every_trial(tmp_path: Path) -> None:
    """The whole command on fresh built-in simulators, with an objective no load here
    can miss: a coarse trial at 2x, then the full window at --max, which passes. No lag
    limit: a busy machine's late sends are no verdict on the search
    (``test_a_client_bound_trial_stops_the_search_without_a_claim_past_it`` has that)."""
    archive, n = _window(tmp_path, 10.0)
    done = _capacity(
        archive, tmp_path / "o", slo="latency:p99<=60s", max_factor="2x", lag_limit=UNBOUND[1]
    )
    result = json.loads((tmp_path / "o" / "cap.json").read_text())
    assert result["stopped"] is None, result["stopped"]
    assert done.returncode == 0, done.stderr
    assert result["capacity"] == 2 and result["interval"] == [2, None]
    assert result["broke_first"] is None
    coarse, full = result["trials"]  # as the search ran them
    # A coarse trial replays a quarter of the window's span in replay time: at 2x,
    # half the window's requests; the full one all of them.
    assert (
        coarse["coarse"]
        and coarse["factor"] == 2
        and coarse["requests"] == pytest.approx(n / 2, rel=0.25)
    )
    assert not full["coarse"] and full["factor"] == 2 and full["requests"] == n
    for trial in result["trials"]:
        assert trial["verdict"] == "pass" and trial["errors"] == 0
        assert {"p50", "p95", "p99"} <= set(trial["latency"])
    assert full["served"] is not None and 0 < full["served"] <= 1.3  # bunching: 1.13
    assert "capacity: at least 2x (the highest factor tried passed)" in done.stdout
    assert (tmp_path / "o" / "cap.svg").read_text().lstrip().startswith("<svg")


@pytest.mark.perf
def test_the_search_agrees_with_a_sweep(tmp_path: Path) -> None:
    # Where a real target's limit lies is this machine's figure: two searches minutes
    # apart agree only while the machine's load stays the same.
    archive, n = _window(tmp_path, 20.0)
    searched = _capacity(archive, tmp_path / "search")
    assert searched.returncode == 0, searched.stderr
    swept = _capacity(archive, tmp_path / "sweep", "--sweep", "0.5x")
    assert swept.returncode == 0, swept.stderr
    result = json.loads((tmp_path / "search" / "cap.json").read_text())
    baseline = json.loads((tmp_path / "sweep" / "cap.json").read_text())
    lo, hi = result["interval"]
    assert lo is not None and hi is not None and result["capacity"] == lo
    # Pinned to --precision, or as near as this window's P99 resolves, and said so.
    assert _within(lo, hi, 0.10) or "resolves the factor" in (result["note"] or ""), result
    base_lo, base_hi = baseline["interval"]
    assert base_lo is not None and base_hi is not None
    assert 0.9 * base_lo <= lo <= 1.1 * base_hi, (result["interval"], baseline["interval"])
    full = [t for t in result["trials"] if not t["coarse"]]
    assert {lo, hi} <= {t["factor"] for t in full}  # both ends rest on full replays
    coarse = {t["factor"]: t["requests"] for t in result["trials"] if t["coarse"]}
    assert coarse[2.0] == pytest.approx(n / 2, rel=0.25), coarse
    assert next(t for t in full if t["factor"] == hi)["verdict"] in ("fail", "uncertain")
    assert result["broke_first"] == "latency:p99<=1500ms"
    for trial in result["trials"]:
        assert trial["verdict"] in ("pass", "fail", "uncertain")
        assert trial["served"] is None or 0 <= trial["served"] <= 1.3
    # At 1x the target keeps up: it answers about as fast as it is sent.
    assert baseline["trials"][0]["factor"] == 1 and baseline["trials"][0]["served"] > 0.85
    assert f"capacity: {lo:.3g}x" in searched.stdout


def test_a_given_target_is_searched_with_drains_between_trials(tmp_path: Path) -> None:
    from tailreplay.sim.launcher import sim_process

    maps = [{"start_ns": T0 + i * 50_000_000, "input_tokens": 200, "output_tokens": 16,
             "stream": True, "path": "/v1/chat/completions"} for i in range(100)]  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", maps)
    with sim_process(["--profile", "fast", "--max-num-seqs", "8"]) as url:
        done = subprocess.run(
            [sys.executable, "-m", "tailreplay", "capacity", str(archive), "--target", url,
             "--slo", "latency:p99<=1500ms", "--window", "1h", "--max", "4x",
             "--precision", "50%", "--drain", "0.5s", *UNBOUND,
             "--out-dir", str(tmp_path / "out"), "--json", str(tmp_path / "cap.json")],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    assert "Traceback" not in done.stderr
    result = json.loads((tmp_path / "cap.json").read_text())
    assert result["trials"] and all(t["requests"] > 0 for t in result["trials"])
    assert "capacity: " in done.stdout
    assert result["stopped"] is None, result["stopped"]
    assert done.returncode == 0, done.stderr
    # The target keeps its prefix cache from one trial to the next: each trial sends
    # prompts of its own, or every trial after the first would be served from the
    # cache (llama.cpp's server: 96-100% of prompt tokens cached, the capacity read
    # 2.44x where the uncached window held 1x).
    trials = sorted((tmp_path / "out").glob("*x-*.msgpack"))
    assert len(trials) >= 2, trials
    for trial in trials:
        answered = [r for r in ArchiveReader([trial]) if r.status == 200]
        cached = sum(r.cached_tokens or 0 for r in answered)
        assert cached <= 0.05 * sum(r.input_tokens or 0 for r in answered), (trial.name, cached)


@pytest.mark.parametrize(("flag", "value"), [("--min", "1x"), ("--min", "0x"), ("--max", "1x")])
def test_factor_bounds_out_of_range_are_usage_errors(tmp_path: Path, flag: str, value: str) -> None:
    from click.testing import CliRunner

    from tailreplay.cli import cli

    archive = tmp_path / "w.msgpack"
    write_plain(archive, [{"start_ns": T0 + i * 10**8, "method": "POST",
                           "path": "/v1/chat/completions", "input_tokens": 10,
                           "output_tokens": 2} for i in range(5)])  # fmt: skip
    result = CliRunner().invoke(cli, ["capacity", str(archive), "--slo", "latency:p99<=1s",
                                      flag, value, "--out-dir", str(tmp_path / "o")])  # fmt: skip
    assert result.exit_code == 2 and flag in result.output, result.output


def test_a_target_that_is_down_is_one_line_not_a_capacity(tmp_path: Path) -> None:
    """Every trial's replay fails its preflight: nothing was measured, so no capacity
    ("below 0.25x") is claimed, and the exit is 1 with the replay's own reason."""
    archive = tmp_path / "w.msgpack"
    write_plain(archive, [{"start_ns": T0 + i * 10**8, "method": "POST",
                           "path": "/v1/chat/completions", "input_tokens": 10,
                           "output_tokens": 2} for i in range(20)])  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "capacity", str(archive), "--slo",
         "latency:p99<=1s", "--target", "http://127.0.0.1:9", "--drain", "0s",
         "--out-dir", str(tmp_path / "o"), "--json", str(tmp_path / "c.json")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 5, done.stderr  # the target could not be measured
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the replay of window.msgpack sent nothing: preflight: cannot")
    assert "capacity:" not in done.stdout and not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("kind", ["coarse", "full", "sweep"])
def test_a_trial_replays_with_the_studys_options(kind: str) -> None:
    """A trial's child replay: the window at the factor (six significant digits), the
    study's tail stretch, lag limit and scrapes, a quarter of its span when coarse, and
    in a search the watch of the objectives it can watch (``--slo-stop``)."""
    from tailreplay.cli.replay import parse_replay_args
    from tailreplay.replayer.scrape import parse_scrape
    from tailreplay.replayer.speed import Speed
    from tailreplay.report.slo import parse_objectives
    from tailreplay.studies.capacity import CapacityStudy, trial_args

    objectives = tuple(parse_objectives(["latency:p99<=1500ms,ttft:p99<=2x,error_rate<=1%"]))
    study = CapacityStudy(
        (Path("a.msgpack"),),
        objectives,
        tail_stretch=1.5,
        lag_limit_s=0.1,
        scrapes=(parse_scrape("target@500ms"),),
        sweep_step=0.5 if kind == "sweep" else None,
    )
    window = Path("out/window.msgpack")
    args = trial_args(study, window, 2**0.5, duration_s=4.0 / 3 if kind == "coarse" else None)
    assert parse_replay_args(args.to_argv()) == args
    assert args.archives == (window,) and args.speed == Speed(1.41421, 1.41421)
    assert (args.tail_stretch, args.lag_limit, args.fail_fast) == (1.5, 0.1, 0)
    assert args.scrapes == study.scrapes and args.amplify == 1
    assert args.duration == (1.33333 if kind == "coarse" else None)
    watched = [o.text for o in args.slos]
    if kind == "sweep":
        assert (watched, args.slo_stop, args.slo_report) == ([], None, True)
    else:
        assert watched == ["latency:p99<=1500ms", "error_rate<=1%"]  # ttft's is relative
        assert (args.slo_stop, args.slo_report) == ("after-sending", False)
    amplified = trial_args(replace(study, by="amplify"), window, 3.0)
    assert amplified.amplify == 3.0 and amplified.speed == Speed(1.0, 1.0)


def test_a_budget_stops_the_search_and_the_last_pass_is_a_lower_bound() -> None:
    run, judge, calls = _limit_at(5)

    def slow_run(factor: float, attempt: int, coarse: bool) -> Path:
        time.sleep(0.2)
        return run(factor, attempt, coarse)

    result = search(slow_run, judge, max_factor=16, precision=0.01, budget_s=0.5)
    assert result.stopped == "the --budget of 500ms was spent"
    assert 2 <= len(calls) <= 4  # no trial starts past the budget; one may end after it
    unbounded = search(run, judge, max_factor=16, precision=0.01)
    assert len(unbounded.trials) > len(result.trials)


def test_the_plot_marks_each_limit_and_the_capacity() -> None:
    run, judge, _ = _limit_at(4)
    result = search(run, judge, max_factor=16, precision=0.05)
    for t in result.trials:  # the fake judge measures no percentiles: the check's value
        t.percentiles = {"latency": {"p99": t.checks[0].value}}
    svg = plot(result)
    assert "limit latency:p99&lt;=1000ms" in svg
    assert f"capacity {result.capacity:.3g}x" in svg
    assert "load factor (x the recorded window&#x27;s rate)" in svg and "P99 ms (log scale)" in svg


@pytest.mark.parametrize("limit", [0.3, 0.8886, 2.7, 11.0])
def test_a_factor_reads_the_same_in_every_line(limit: float) -> None:
    # A bisected 0.888603x was printed 0.889x, 0.8886x and 0.888603x by three views:
    # trials are made at round factors (3 significant digits at 5%), shown as they are.
    run, judge, calls = _limit_at(limit, uncertain_band=0.03)
    result = search(run, judge, max_factor=16, precision=0.05)
    assert all(f"{f:g}" == f"{f:.3g}" for f, _, _ in calls), calls
    lo, hi = result.interval
    assert lo is not None and hi is not None and lo <= limit < hi
    lines = render(result)
    assert f"capacity: {lo:g}x (passes at {lo:g}x," in "\n".join(lines)
    uncertain = any(t.verdict == "uncertain" for t in result.trials)
    legend = [line for line in lines if line.startswith("uncertain: the objective's 95% interval")]
    assert len(legend) == uncertain


def test_a_budget_spent_before_a_full_pass_says_what_passed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A coarse pass at 2x, the full window failing at 4x, then the budget: no capacity,
    and the lines say the coarse 2x passed rather than that nothing did."""
    from tailreplay.cli.capacity import _finish
    from tailreplay.errors import NotJudged

    run, judge, calls = _limit_at(3)

    def slow_run(factor: float, attempt: int, coarse: bool) -> Path:
        if not coarse:  # the first full replay outlasts the budget
            time.sleep(2.5)
        return run(factor, attempt, coarse)

    result = search(slow_run, judge, max_factor=16, precision=0.05, budget_s=2.0)
    assert calls == [(2.0, 0, True), (4.0, 0, False)] and result.capacity is None
    lines = render(result)
    assert lines[-2:] == [
        "capacity: below 4x: no full replay passed (the coarse trial at 2x passed, "
        "which only aims the full ones)",
        "broke first: latency:p99<=1000ms",
    ]
    assert "stopped: the --budget of 2s was spent; before any full replay passed" in lines
    with pytest.raises(NotJudged) as failed:
        _finish(result, None, None, None)
    assert str(failed.value) == (
        "the search stopped before any full replay passed (the coarse trial at 2x passed, "
        "which only aims the full ones): the --budget of 2s was spent"
    )
    assert "before any trial passed" not in capsys.readouterr().out


def _twin(path: Path, **costs: float) -> Path:
    """A calibrated profile as `tailreplay sim calibrate` writes it: ``fast`` with these
    costs, and its calibration's account of itself."""
    from dataclasses import asdict

    from tailreplay.sim.profiles import profile

    data = {
        **asdict(profile("fast").with_overrides(served_model="staging-model", **costs)),
        "fitted": {"max_num_seqs": "the most seen decoding", "served_model": "480 named it"},
        "calibration": {
            "files": ["staging-replay.msgpack"],
            "requests": 480,
            "rate_rps": 12.0,
            "mean_concurrency": 9.5,
            "residuals": {"ttft_median": 0.045, "latency_median": 0.012},
        },
    }
    path.write_text(json.dumps(data))
    return path


def test_a_search_against_a_twin_runs_it_and_says_whose_answer_it_is(tmp_path: Path) -> None:
    # A twin whose decode steps take 150 ms: 10-60 tokens an answer take seconds, where
    # the fast profile answers in well under one; the SLO of 1.5 s fails on the twin.
    archive, n = _window(tmp_path, 5.0)
    twin = _twin(tmp_path / "twin.json", decode_base_ms=150.0)
    # Run with twice its slots, on a window of another model's requests: said, not refused.
    done = _capacity(archive, tmp_path / "o", "--twin", str(twin), "--min", "0.5x",
                     "--sim-arg=--max-num-seqs=512", max_factor="2x",
                     lag_limit=UNBOUND[1])  # fmt: skip
    result = json.loads((tmp_path / "o" / "cap.json").read_text())
    assert result["capacity"] is None and done.returncode == 1, done.stdout + done.stderr
    assert result["twin"]["profile"] == str(twin)
    assert result["twin"]["files"] == ["staging-replay.msgpack"]
    assert f"twin: {twin}, calibrated on staging-replay.msgpack (480 requests at 12.00 req/s" in (
        done.stdout
    )
    assert "twin: checked at that load only: TTFT within 4.5% at the median" in done.stdout
    assert f"twin: warning: {twin} was fitted to max_num_seqs 256; running with 512: " in (
        done.stdout
    )
    model = f"the window's requests name 'm' ({n} of {n} that name one); the twin was calibrated"
    assert [line[: len(model)] for line in result["twin"]["departures"]][1:] == [model]


@pytest.mark.parametrize(
    ("extra", "code", "said"),
    [
        (["--target", "http://127.0.0.1:9"], 2, "give --twin or --target, not both"),
        ([], 3, "no calibration in it: --twin takes what `tailreplay sim calibrate` writes"),
    ],
)
def test_a_twin_that_cannot_stand_in_is_one_line(
    tmp_path: Path, extra: list[str], code: int, said: str
) -> None:
    archive, _ = _window(tmp_path, 5.0)
    twin = _twin(tmp_path / "twin.json")
    if code == 3:  # a plain profile: no calibration to say what the answer stands on
        data = json.loads(twin.read_text())
        del data["calibration"]
        twin.write_text(json.dumps(data))
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "capacity", str(archive), "--twin", str(twin),
         "--slo", "latency:p99<=1s", "--out-dir", str(tmp_path / "o"), *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == code and done.stderr.count("\n") == 1, done.stderr
    assert said in done.stderr


@pytest.mark.parametrize(
    ("calibration", "said"),
    [
        ({"files": [{"a": 1}, 3, None]}, "calibration.files must be the names of the results"),
        ({"files": ["r.msgpack"], "rate_rps": 1e308}, "calibration.rate_rps must be at most"),
        ({"files": ["r.msgpack"], "requests": 10**30}, "calibration.requests must be at most"),
    ],
)
def test_a_twin_whose_account_of_itself_is_no_calibration_is_refused(
    tmp_path: Path, calibration: dict[str, object], said: str
) -> None:
    from tailreplay.errors import InputError
    from tailreplay.studies.capacity import twin_of

    twin = _twin(tmp_path / "twin.json")
    data = json.loads(twin.read_text())
    data["calibration"] = calibration
    twin.write_text(json.dumps(data))
    with pytest.raises(InputError, match=said):
        twin_of(twin)
