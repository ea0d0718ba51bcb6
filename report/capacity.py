"""``capacity``: a trial's figures and verdict, and what the command prints.

A trial is one load factor of the recorded window, replayed (``capacity_search``
decides which) and judged here, on its bootstrap intervals, not its point
estimates: an objective passes when its percentile's 95% interval is at or under the limit,
fails when the interval is all above it, and is *uncertain* when it straddles
it. An uncertain trial is replayed again (``repeats`` times at most) and judged on
all its runs pooled; still uncertain, it counts as not shown to pass. A trial
whose dispatch lag says the client was the bottleneck stops the search: what it
measured is the replayer, and no capacity is claimed past the last clean pass.

A trial replays its whole schedule but stops waiting for answers once an objective
is missed whatever the rest does (``replay --slo-stop after-sending``): a trial far
past the limit would otherwise wait out its queue. Its requests still in flight
then were cancelled, and they count here as answered when cancelled: their latency
is their time in flight, a lower bound, and they are not errors. Its latency
percentiles are lower bounds, its TTFT leaves them out, and its verdict is a
failure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tailreplay.report.compare import compare
from tailreplay.report.engine_findings import engine_report
from tailreplay.report.model import Report
from tailreplay.report.side import Side, load_side
from tailreplay.report.slo import Objective, cell
from tailreplay.report.slo_scopes import goodput
from tailreplay.report.svg import Line, line_chart

__all__ = ["Search", "Trial", "broke_first", "judge", "plot", "render", "served_share", "to_json"]

Verdict = Literal["pass", "fail", "uncertain", "client-bound"]


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
    coarse: bool = False
    """Replayed a quarter of the window's span in replay time only, to aim the full
    trials."""
    cut: int = 0
    """Requests cancelled in flight once an objective was missed (``--slo-stop``): the
    percentiles count their time in flight, so they are lower bounds."""
    served: float | None = None
    """Answers per second in the second half of the sending over the mean send rate
    (``served_share``): about 1 where the target kept up, under it where a queue
    grew. None for pooled runs or too few requests."""
    sending_s: float | None = None
    """From the first request sent to the last (one run; None for pooled runs)."""


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
    note: str | None = None
    """Why the interval is wider than ``--precision`` (the window's resolution), else None."""


def judge(
    factor: float,
    results: Sequence[Path],
    objectives: Sequence[Objective],
    recorded: Side | None,
) -> Trial:
    """One trial's figures and verdict from its result archives (several runs pooled)."""
    side = load_side(results)
    served = served_share(side) if len(results) == 1 else None
    sending_s = float(np.ptp(side.start_ns)) / 1e9 if len(results) == 1 and side.n else None
    # A cut request was not answered within any limit: goodput counts it out.
    good = goodput(side, np.ones(side.n, dtype=bool), objectives)
    cut = _count_cut(side)
    report = compare(recorded, side)
    overall = report["overall"]["replayed"]
    checks = [_check(o, report) for o in objectives]
    engine = engine_report(results, side)
    verdicts = {c.verdict for c in checks}
    client = report["client"]
    verdict: Verdict = (
        "client-bound"
        if client is not None and client["client_bound"]
        else "fail"
        if "fail" in verdicts or cut
        else "uncertain"
        if "uncertain" in verdicts
        else "pass"
    )
    return Trial(
        factor=factor,
        runs=len(results),
        requests=overall["requests"],
        errors=overall["errors"],
        error_rate=overall["error_rate"],
        throughput_rps=overall["throughput_rps"],
        goodput=good,
        percentiles=_percentiles(report),
        checks=checks,
        verdict=verdict,
        findings=[f["text"] for f in (engine["findings"] if engine else [])],
        cut=cut,
        served=served,
        sending_s=sending_s,
    )


SERVED_MIN_REQUESTS = 50
"""Fewer requests sent in each half than this, and no share is given."""


def served_share(side: Side) -> float | None:
    """The rate of successful answers over the second half of the sending period, over
    the mean rate requests were sent at (one run's results): about 1 where the target
    keeps up (give or take how the arrivals bunch), under it past the knee, where the
    target answers at its own rate whatever it is sent: there ``factor * share`` is
    about the factor it saturates at. (In the first half a queue is still building.)
    Read before cut requests are made answered: they were not."""
    if side.n < 2 * SERVED_MIN_REQUESTS:
        return None
    sent = side.start_ns
    first, last = int(sent.min()), int(sent.max())
    half = first + (last - first) // 2
    if last <= first:
        return None
    done = sent + side.duration_ns
    answered = ~side.error & ~side.cancelled & (done >= half) & (done <= last)
    return (int(answered.sum()) / (last - half)) / (side.n / (last - first))


def _count_cut(side: Side) -> int:
    """Requests cancelled once an objective was missed, made answered at their time in
    flight (the module docstring); how many."""
    cut = side.cancelled
    side.error[cut] = False
    # Whether a cut request had its first token is not kept: it has no TTFT.
    side.ttfb_ns[cut] = -1
    side.error_kinds.pop("cancelled", None)
    return int(cut.sum())


def _check(obj: Objective, report: Report) -> Check:
    """The SLO's own cell (value and limit, relative limits included), judged on the
    value's bootstrap interval."""
    c = cell(obj, report["overall"])
    value, limit = c["value"], c["limit"]
    if value is None or limit is None:
        return Check(obj.text, value, None, None, limit, "fail")  # nothing served: not a pass
    if obj.metric == "error_rate":  # a share, without an interval
        return Check(obj.text, value, value, value, limit, "pass" if c["ok"] else "fail")
    per_q = (report["overall"]["replayed"]["metrics"].get(obj.metric) or {})[obj.quantile or ""]
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


def broke_first(t: Trial) -> str | None:
    """The objective of a failed trial furthest over its limit."""
    over = [c for c in t.checks if c.verdict != "pass"]
    ratio = [(c.value or math.inf) / c.limit if c.limit else math.inf for c in over]
    return over[int(np.argmax(ratio))].objective if over else None


def to_json(result: Search) -> dict[str, Any]:
    """What ``--json`` writes."""
    return {
        "capacity": result.capacity,
        "interval": list(result.interval),
        "broke_first": result.broke_first,
        "stopped": result.stopped,
        "note": result.note,
        "trials": [
            {
                "factor": t.factor,
                "runs": t.runs,
                "requests": t.requests,
                "errors": t.errors,
                "error_rate": t.error_rate,
                "throughput_rps": t.throughput_rps,
                "goodput": t.goodput,
                "verdict": t.verdict,
                "coarse": t.coarse,
                "cut": t.cut,
                "served": t.served,
                **t.percentiles,
                "findings": t.findings,
                "checks": [c.__dict__ for c in t.checks],
            }
            for t in result.trials
        ],
    }


def render(result: Search) -> list[str]:
    """The table ``capacity`` prints, then the finding."""
    lines = [
        f"{'factor':>8} {'requests':>9} {'latency P50/P95/P99 ms':>24} "
        f"{'TTFT P50/P95/P99 ms':>21} {'errors':>7} {'goodput':>8}  verdict"
    ]
    for t in sorted(result.trials, key=lambda t: (t.coarse, t.factor)):
        lines.append(
            f"{t.factor:>7.3g}x{'c' if t.coarse else ' '}{t.requests:>9,} "
            f"{_three(t.percentiles.get('latency')):>24} "
            f"{_three(t.percentiles.get('ttft')):>21} {_pct(t.error_rate):>7} "
            f"{_pct(t.goodput):>8}  {t.verdict}"
            + (f" ({t.runs} runs)" if t.runs > 1 else "")
            + (f" (stopped: {t.cut:,} cut)" if t.cut else "")
        )
    if any(t.coarse for t in result.trials):
        lines.append(
            "c: a coarse trial (a quarter of the window's span in replay time), which only "
            "aims the full ones"
        )
    if any(t.cut for t in result.trials):
        lines.append(
            "stopped: once an objective was missed whatever the rest did, the answers still "
            "awaited were cut; their time in flight counts, so those percentiles are lower "
            "bounds"
        )
    lo, hi = result.interval
    if result.stopped is not None:
        lines.append(f"stopped: {result.stopped}; no capacity is claimed past the last pass")
    if result.capacity is None and hi is None:
        lines.append("capacity: not measured (no full replay passed or failed)")
    elif result.capacity is None:
        lines.append(f"capacity: below {hi:g}x (the lowest factor tried did not pass)")
    elif hi is None and result.stopped is not None:
        lines.append(f"capacity: at least {lo:.3g}x (not measured past it)")
    elif hi is None:
        lines.append(f"capacity: at least {lo:g}x (the highest factor tried passed)")
    else:
        top = [t.verdict for t in result.trials if t.factor == hi and not t.coarse]
        how = "uncertain" if top[-1:] == ["uncertain"] else "fails"
        lines.append(f"capacity: {lo:.3g}x (passes at {lo:.3g}x, {how} at {hi:.3g}x)")
    if result.note is not None:
        lines.append(f"interval: {result.note}")
    if result.broke_first is not None:
        lines.append(f"broke first: {result.broke_first}")
        failing = [t for t in result.trials if t.factor == hi and not t.coarse]
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
    trials = sorted((t for t in result.trials if not t.coarse), key=lambda t: t.factor)
    xs = [t.factor for t in trials]
    lines = [
        Line(f"{metric} P99", xs, [t.percentiles.get(metric, {}).get("p99") for t in trials], color)
        for metric, color in (("latency", "#1f77b4"), ("ttft", "#ff7f0e"))
    ]
    return line_chart(
        "P99 against the load factor", lines, x_label="factor (x)", y_label="ms", log_y=True
    )
