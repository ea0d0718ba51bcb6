"""``capacity``: what a search found, and what the command prints of it.

A ``Trial`` is one load factor of the recorded window, replayed and judged
(``tailreplay/studies/capacity_judge.py`` judges it, on its bootstrap intervals:
each ``Check`` passes, fails or is uncertain); a ``Search`` is every trial and the
capacity they bracket (``tailreplay/studies/capacity_search.py``). Here: those
types, the objective that broke first, the ``--json`` document, the table and the
chart.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from tailreplay.report.svg import Line, Mark, line_chart

__all__ = [
    "Check",
    "Search",
    "Trial",
    "TwinSource",
    "Verdict",
    "broke_first",
    "coarse_pass",
    "decided_by",
    "plot",
    "render",
    "to_json",
    "trial_line",
]

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
    (``studies.capacity_judge.served_share``): about 1 where the target kept up, under
    it where a queue grew. None for pooled runs or too few requests."""
    sending_s: float | None = None
    """From the first request sent to the last (one run; None for pooled runs)."""


@dataclass
class TwinSource:
    """The calibrated profile a search ran against in place of the target (``--twin``):
    what it was calibrated on, and the one load it was checked at (its calibration's)."""

    profile: str
    files: tuple[str, ...]
    """The results it was calibrated from."""
    requests: int
    rate_rps: float
    """The calibration's load: its requests a second."""
    mean_concurrency: float
    ttft_residual: float | None
    """|predicted - measured| / measured at the median, over the calibration's own requests."""
    latency_residual: float | None
    window_rps: float = 0.0
    """This search's window at 1x: its requests a second."""
    departures: tuple[str, ...] = ()
    """Where the search ran the twin outside what it was calibrated on: another slot
    count or model (``--sim-arg``), a window of another model's requests."""

    def describe(self) -> list[str]:
        """The lines ``capacity`` prints: whose answer this is, and how far it was checked."""
        checked = ", ".join(
            f"{name} within {value:.1%} at the median"
            for name, value in (("TTFT", self.ttft_residual), ("latency", self.latency_residual))
            if value is not None
        )
        at = f" (the window at {self.rate_rps / self.window_rps:.2g}x)" if self.window_rps else ""
        return [
            f"twin: {self.profile}, calibrated on {', '.join(self.files)} ({self.requests:,} "
            f"requests at {self.rate_rps:.2f} req/s{at}, {self.mean_concurrency:.1f} in flight "
            f"on average)",
            f"twin: checked at that load only{': ' + checked if checked else ''}; at other "
            "factors the answer is the fitted model's, not the target's",
            "twin: each trial served offline, on a virtual clock (replay --offline)",
            *(f"twin: warning: {line}" for line in self.departures),
        ]


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
    twin: TwinSource | None = None
    """The calibrated profile the trials ran against instead of the target, if any."""


def decided_by(t: Trial) -> Check | None:
    """The objective that decided a trial: the one furthest over its limit, or, when
    every one passed, the nearest to it (value over limit; a missing value counts as
    over)."""
    judged = [c for c in t.checks if c.limit]
    if not judged:
        return None
    return max(judged, key=lambda c: (math.inf if c.value is None else c.value) / (c.limit or 1))


def trial_line(t: Trial) -> str:
    """A trial as its progress line gives it: the objective that decided it."""
    cut = f", stopped: {t.cut:,} cut (a lower bound)" if t.cut else ""
    deciding = decided_by(t)
    if deciding is None:
        return f"{t.requests:,} requests, errors {t.errors:,}{cut}"
    return (
        f"{t.requests:,} requests, {deciding.objective}: {_value(deciding)}, "
        f"errors {t.errors:,}{cut}"
    )


def _value(c: Check) -> str:
    if c.value is None:
        return "no value"
    if c.objective.startswith("error_rate"):
        return f"{100 * c.value:.2f}%"
    return f"{c.value:,.0f} ms"


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
        "twin": None if result.twin is None else asdict(result.twin),
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


def coarse_pass(result: Search) -> str:
    """What passed when no full replay did: `` (the coarse trial at 2x passed, which
    only aims the full ones)``, or "" when no coarse trial passed either."""
    passed = [t.factor for t in result.trials if t.coarse and t.verdict == "pass"]
    if result.capacity is not None or not passed:
        return ""
    return f" (the coarse trial at {max(passed):g}x passed, which only aims the full ones)"


def render(result: Search) -> list[str]:
    """The table ``capacity`` prints, then the finding."""
    lines = [
        f"{'factor':>8} {'requests':>9} {'latency P50/P95/P99 ms':>24} "
        f"{'TTFT P50/P95/P99 ms':>21} {'errors':>7} {'goodput':>8}  verdict"
    ]
    for t in sorted(result.trials, key=lambda t: (t.coarse, t.factor)):
        lines.append(
            f"{t.factor:>7g}x{'c' if t.coarse else ' '}{t.requests:>9,} "
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
    if any(t.verdict == "uncertain" for t in result.trials):
        lines.append(
            "uncertain: the objective's 95% interval holds its limit (too few requests in "
            "the window to tell the tail from the limit); a longer --window or more "
            "--repeats decides more trials"
        )
    if any(t.cut for t in result.trials):
        lines.append(
            "stopped: once an objective was missed whatever the rest did, the answers still "
            "awaited were cut; their time in flight counts, so those percentiles are lower "
            "bounds"
        )
    hi = result.interval[1]
    if result.stopped is not None and result.capacity is None:
        lines.append(f"stopped: {result.stopped}; before any full replay passed")
    elif result.stopped is not None:
        lines.append(f"stopped: {result.stopped}; no capacity is claimed past the last pass")
    lines.append(_answer(result))
    if result.twin is not None:
        lines += result.twin.describe()
    if result.note is not None:
        lines.append(f"interval: {result.note}")
    if result.broke_first is not None:
        lines.append(f"broke first: {result.broke_first}")
        failing = [t for t in result.trials if t.factor == hi and not t.coarse]
        lines += [f"  why: {text}" for text in (failing[-1].findings if failing else [])]
    return lines


def _answer(result: Search) -> str:
    """The ``capacity:`` line: the factor found and what bounds it, or why there is none."""
    lo, hi = result.interval
    if result.capacity is None and hi is None:
        return f"capacity: not measured (no full replay passed or failed){coarse_pass(result)}"
    if result.capacity is None and coarse_pass(result):
        return f"capacity: below {hi:g}x: no full replay passed{coarse_pass(result)}"
    if result.capacity is None:
        return f"capacity: below {hi:g}x (the lowest factor tried did not pass)"
    if hi is None and result.stopped is not None:
        return f"capacity: at least {lo:g}x (not measured past it)"
    if hi is None:
        return f"capacity: at least {lo:g}x (the highest factor tried passed)"
    top = [t.verdict for t in result.trials if t.factor == hi and not t.coarse]
    how = "uncertain" if top[-1:] == ["uncertain"] else "fails"
    return f"capacity: {lo:g}x (passes at {lo:g}x, {how} at {hi:g}x)"


def _three(row: dict[str, float | None] | None) -> str:
    if not row:
        return "-"
    return "/".join("-" if row[q] is None else f"{row[q]:,.0f}" for q in ("p50", "p95", "p99"))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def plot(result: Search) -> str:
    """P99 latency and TTFT against the factor, as an SVG chart, with each P99
    objective's limit and the capacity found marked."""
    trials = sorted((t for t in result.trials if not t.coarse), key=lambda t: t.factor)
    xs = [t.factor for t in trials]
    colors = {"latency": "#1f77b4", "ttft": "#ff7f0e"}
    lines = [
        Line(f"{metric} P99", xs, [t.percentiles.get(metric, {}).get("p99") for t in trials], color)
        for metric, color in colors.items()
    ]
    limits = {
        c.objective: c.limit
        for t in trials
        for c in t.checks
        if c.limit and c.objective.split(":", 1)[0] in colors and ":p99<=" in c.objective
    }
    y_marks = [
        Mark(f"limit {objective}", limit, colors[objective.split(":", 1)[0]])
        for objective, limit in limits.items()
        if limit is not None
    ]
    x_marks = (
        [Mark(f"capacity {result.capacity:g}x", result.capacity, "#2ca02c")]
        if result.capacity is not None
        else []
    )
    return line_chart(
        "P99 against the load factor",
        lines,
        x_label="load factor (x the recorded window's rate)",
        y_label="P99 ms",
        log_y=True,
        x_marks=x_marks,
        y_marks=y_marks,
    )
