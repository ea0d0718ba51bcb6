"""``capacity``: the largest load factor of a recorded window the target serves at the SLO.

The search replays one window at rising factors (1x, 2x, 4x, ... up to ``max``; or
halving below 1x when 1x fails) until a trial fails, then bisects between the last
pass and the first failure until they are within ``precision`` of each other. A
trial is a callable that replays the window at a factor and returns its result
archive (the command line runs ``tailreplay replay`` against a drained target).

Each trial is judged on its bootstrap intervals, not its point estimates: an
objective passes when its percentile's 95% interval is at or under the limit,
fails when the interval is all above it, and is *uncertain* when it straddles
it. An uncertain trial is replayed again (``repeats`` times at most) and judged on
all its runs pooled; still uncertain, it counts as not shown to pass. A trial
whose dispatch lag says the client was the bottleneck stops the search: what it
measured is the replayer, and no capacity is claimed past the last clean pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tailreplay.report.compare import compare
from tailreplay.report.engine import engine_report
from tailreplay.report.model import Report
from tailreplay.report.side import Side, load_side
from tailreplay.report.slo import Objective
from tailreplay.report.slo_scopes import goodput
from tailreplay.report.svg import Line, line_chart

__all__ = ["Search", "Trial", "judge", "plot", "render", "search", "to_json"]

Verdict = Literal["pass", "fail", "uncertain", "client-bound"]
MAX_TRIALS = 24
"""Whatever the precision asks, a search stops after this many trials (repeats count)."""


@dataclass
class Check:
    objective: str
    value: float | None
    low: float | None
    high: float | None
    limit: float | None
    verdict: Verdict


@dataclass
class Trial:
    factor: float
    runs: int
    requests: int
    errors: int
    error_rate: float | None
    throughput_rps: float | None
    goodput: float | None
    """Share of requests that succeeded and met every per-request objective."""
    percentiles: dict[str, dict[str, float | None]]
    """``latency`` and ``ttft``: P50/P95/P99 (ms) and the P99's interval."""
    checks: list[Check]
    verdict: Verdict
    findings: list[str] = field(default_factory=list)
    """What the target's own metrics say (``--scrape``), ``report``'s rules."""


@dataclass
class Search:
    trials: list[Trial] = field(default_factory=list)
    capacity: float | None = None
    """The highest factor that passed (None: not even the lowest tried)."""
    interval: tuple[float | None, float | None] = (None, None)
    """(last pass, first failure); the failure None when ``max`` passed."""
    broke_first: str | None = None
    """The objective furthest over its limit at the lowest failing factor."""
    stopped: str | None = None
    """Why the search ended early (the client was the bottleneck), else None."""


def judge(
    factor: float,
    results: Sequence[Path],
    objectives: Sequence[Objective],
    recorded: Side | None,
) -> Trial:
    """One trial's figures and verdict from its result archives (several runs pooled)."""
    side = load_side(results)
    report = compare(recorded, side)
    overall = report["overall"]["replayed"]
    checks = [_check(o, report) for o in objectives]
    engine = engine_report(results, side)
    verdicts = {c.verdict for c in checks}
    client = report["client"]
    verdict: Verdict = (
        "client-bound" if client is not None and client["client_bound"]
        else "fail" if "fail" in verdicts
        else "uncertain" if "uncertain" in verdicts
        else "pass"
    )  # fmt: skip
    return Trial(
        factor=factor, runs=len(results), requests=overall["requests"], errors=overall["errors"],
        error_rate=overall["error_rate"], throughput_rps=overall["throughput_rps"],
        goodput=goodput(side, np.ones(side.n, dtype=bool), objectives),
        percentiles=_percentiles(report), checks=checks, verdict=verdict,
        findings=[f["text"] for f in (engine["findings"] if engine else [])],
    )  # fmt: skip


def _check(obj: Objective, report: Report) -> Check:
    replayed = report["overall"]["replayed"]
    if obj.metric == "error_rate":
        rate = replayed["error_rate"]
        ok = rate is not None and rate <= obj.limit
        return Check(obj.text, rate, rate, rate, obj.limit, "pass" if ok else "fail")
    per_q = (replayed["metrics"].get(obj.metric) or {}).get(obj.quantile or "")
    limit: float | None = obj.limit
    if obj.relative:
        recorded = report["overall"].get("recorded")
        base = (
            (recorded["metrics"].get(obj.metric) or {}).get(obj.quantile or "")
            if recorded
            else None
        )
        limit = base["value"] * obj.limit if base else None
    if per_q is None or limit is None:
        return Check(obj.text, None, None, None, limit, "fail")  # nothing served: not a pass
    value = per_q["value"]
    low = per_q["low"] if per_q["low"] is not None else value
    high = per_q["high"] if per_q["high"] is not None else value
    verdict: Verdict = "pass" if high <= limit else "fail" if low > limit else "uncertain"
    return Check(obj.text, value, low, high, limit, verdict)


def _percentiles(report: Report) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    metrics = report["overall"]["replayed"]["metrics"]
    for metric, per_q in (("latency", metrics.get("latency")), ("ttft", metrics.get("ttft"))):
        if not per_q:
            continue
        row: dict[str, float | None] = {q: per_q[q]["value"] for q in ("p50", "p95", "p99")}
        row["p99_low"], row["p99_high"] = per_q["p99"]["low"], per_q["p99"]["high"]
        out[metric] = row
    return out


def search(
    run: Callable[[float, int], Path],
    judge_runs: Callable[[float, list[Path]], Trial],
    *,
    max_factor: float,
    precision: float,
    repeats: int = 2,
    say: Callable[[str], None] = lambda _: None,
) -> Search:
    """The capacity: ``run(factor, attempt)`` replays the window at ``factor`` and
    returns its results; ``judge_runs`` turns a factor's runs into a ``Trial``."""
    out = Search()
    floor = 1.0 / max_factor
    passed: float | None = None
    failed: float | None = None

    def trial(factor: float) -> Verdict:
        runs: list[Path] = []
        while True:
            runs.append(run(factor, len(runs)))
            t = judge_runs(factor, runs)
            if t.verdict != "uncertain" or len(runs) > repeats or _spent(out, runs):
                break
            say(f"{factor:g}x: uncertain, replaying it again ({len(runs) + 1} runs pooled)")
        out.trials.append(t)
        say(f"{factor:g}x: {t.verdict} ({_line(t)})")
        return t.verdict

    factor = 1.0
    while True:  # outwards from 1x: doubling while it passes, halving while it fails
        verdict = trial(factor)
        if verdict == "client-bound":
            out.stopped = f"the client was the bottleneck at {factor:g}x (dispatch lag)"
            break
        if verdict == "pass":
            passed = factor
            if failed is not None or factor >= max_factor or _spent(out):
                break
            factor = min(factor * 2, max_factor)
        else:
            failed = factor
            if passed is not None or factor <= floor or _spent(out):
                break
            factor = max(factor / 2, floor)
    while out.stopped is None and passed is not None and failed is not None:
        if failed / passed - 1 <= precision or _spent(out):
            break
        mid = math.sqrt(passed * failed)  # halves the ratio, as a doubling search sets it
        verdict = trial(mid)
        if verdict == "client-bound":
            out.stopped = f"the client was the bottleneck at {mid:g}x (dispatch lag)"
        elif verdict == "pass":
            passed = mid
        else:
            failed = mid
    out.capacity, out.interval = passed, (passed, failed)
    out.broke_first = _broke_first(out.trials, failed)
    return out


def _spent(out: Search, runs: Sequence[Path] = ()) -> bool:
    return sum(t.runs for t in out.trials) + len(runs) >= MAX_TRIALS


def _broke_first(trials: Sequence[Trial], failed: float | None) -> str | None:
    at = [t for t in trials if t.factor == failed]
    if not at:
        return None
    over = [c for c in at[-1].checks if c.verdict != "pass"]
    ratio = [(c.value or math.inf) / c.limit if c.limit else math.inf for c in over]
    return over[int(np.argmax(ratio))].objective if over else None


def _line(t: Trial) -> str:
    lat = t.percentiles.get("latency", {})
    p99 = lat.get("p99")
    return (f"{t.requests:,} requests, P99 latency "
            f"{'-' if p99 is None else f'{p99:,.0f} ms'}, errors {t.errors:,}")  # fmt: skip


def to_json(result: Search) -> dict[str, Any]:
    """What ``--json`` writes."""
    return {
        "capacity": result.capacity,
        "interval": list(result.interval),
        "broke_first": result.broke_first,
        "stopped": result.stopped,
        "trials": [
            {
                "factor": t.factor, "runs": t.runs, "requests": t.requests, "errors": t.errors,
                "error_rate": t.error_rate, "throughput_rps": t.throughput_rps,
                "goodput": t.goodput, "verdict": t.verdict, **t.percentiles,
                "findings": t.findings,
                "checks": [c.__dict__ for c in t.checks],
            }
            for t in result.trials
        ],
    }  # fmt: skip


def render(result: Search) -> list[str]:
    """The table ``capacity`` prints, then the finding."""
    lines = [f"{'factor':>8} {'requests':>9} {'latency P50/P95/P99 ms':>24} "
             f"{'TTFT P50/P95/P99 ms':>21} {'errors':>7} {'goodput':>8}  verdict"]  # fmt: skip
    for t in sorted(result.trials, key=lambda t: t.factor):
        lines.append(
            f"{t.factor:>7.3g}x {t.requests:>9,} {_three(t.percentiles.get('latency')):>24} "
            f"{_three(t.percentiles.get('ttft')):>21} {_pct(t.error_rate):>7} "
            f"{_pct(t.goodput):>8}  {t.verdict}" + (f" ({t.runs} runs)" if t.runs > 1 else "")
        )
    lo, hi = result.interval
    if result.stopped is not None:
        lines.append(f"stopped: {result.stopped}; no capacity is claimed past the last pass")
    if result.capacity is None:
        lines.append(f"capacity: below {hi:g}x (the lowest factor tried failed)")
    elif hi is None and result.stopped is not None:
        lines.append(f"capacity: at least {lo:.3g}x (not measured past it)")
    elif hi is None:
        lines.append(f"capacity: at least {lo:g}x (the highest factor tried passed)")
    else:
        lines.append(f"capacity: {lo:.3g}x (passes at {lo:.3g}x, fails at {hi:.3g}x)")
    if result.broke_first is not None:
        lines.append(f"broke first: {result.broke_first}")
        failing = [t for t in result.trials if t.factor == hi]
        lines += [f"  why: {text}" for text in (failing[-1].findings if failing else [])]
    return lines


def _three(row: dict[str, float | None] | None) -> str:
    if not row:
        return "-"
    return "/".join("-" if row[q] is None else f"{row[q]:,.0f}" for q in ("p50", "p95", "p99"))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def plot(result: Search) -> str:
    """P99 latency and TTFT against the factor, as an SVG chart."""
    trials = sorted(result.trials, key=lambda t: t.factor)
    xs = [t.factor for t in trials]
    lines = [
        Line(f"{metric} P99", xs, [t.percentiles.get(metric, {}).get("p99") for t in trials], color)
        for metric, color in (("latency", "#1f77b4"), ("ttft", "#ff7f0e"))
    ]
    return line_chart("P99 against the load factor", lines, x_label="factor (x)",
                      y_label="ms", log_y=True)  # fmt: skip
