"""``capacity``: one trial judged from its result archives.

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

The verdict and figures are ``report.capacity_result``'s types, which the command prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tailreplay.report.capacity_result import Check, Trial, Verdict
from tailreplay.report.compare import compare
from tailreplay.report.engine_findings import engine_report
from tailreplay.report.model import Report
from tailreplay.report.side import Side, load_side
from tailreplay.report.slo import Objective, cell
from tailreplay.report.slo_scopes import goodput

__all__ = ["SERVED_MIN_REQUESTS", "judge", "served_share"]


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
    cut = side.cancelled.copy()
    side.error[cut] = False
    side.cancelled[cut] = False  # answered now, at their time in flight
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
