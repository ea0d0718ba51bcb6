"""The capacity search: where between passing and failing the target's limit lies.

Two phases, so that most replays are short and the answer rests on full ones:

1. **Coarse**: a quarter of the window's span in replay time (``COARSE_SHARE``;
   more of the window at higher factors, so the load lasts as long at each) at 1x,
   then doubling while it passes (or halving while it fails) up to ``max``: a
   bracket. Its verdicts only aim the next phase.
2. **Full**: the whole window, first at the factor where the coarse bracket puts the
   limit (interpolated on the binding objective's value over its limit, in log
   space; coarse replays are short, so queues have less time to build and the aim
   is often high). Each next factor is aimed from the last at where it would be
   decided the other way (its interval's far end at the limit): a miss by 4x is
   taken as twice the factor (``ORDER``) unless two full trials (before them the
   coarse bracket, whose values run low at both ends alike) give the local order, by
   at least one ``precision`` step, the step doubling with each move from the same
   side; once a full replay has passed and one has not, the next is interpolated
   between them, until they are within ``precision`` or within what the window
   resolves (``_reach``: nearer the limit than that, trials stay uncertain).

An uncertain trial is replayed only when pooling one more run can decide it
(``_decidable``). The capacity is the highest factor a full replay passed; the
interval is [that, the lowest factor a full replay did not pass]. Coarse trials
never set either.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from tailreplay.report.capacity import Search, Trial, broke_first

__all__ = ["COARSE_SHARE", "MAX_TRIALS", "search", "sweep"]

COARSE_SHARE = 0.25
MAX_TRIALS = 24
"""Whatever the precision asks, a search stops after this many replays (repeats count)."""

Run = Callable[[float, int, bool], Path]
"""``run(factor, attempt, coarse)``: replay the window (``COARSE_SHARE`` of its span in
replay time when coarse)."""
Judge = Callable[[float, list[Path]], Trial]


class _State:
    def __init__(self, run: Run, judge: Judge, repeats: int, say: Callable[[str], None]) -> None:
        self.run, self.judge, self.repeats, self.say = run, judge, repeats, say
        self.out = Search()
        self.order = ORDER
        """The order first aims assume: the coarse bracket's where it has one. Coarse
        values run low (short replays build shorter queues), but alike at both ends."""

    def spent(self, extra: int = 0) -> bool:
        return sum(t.runs for t in self.out.trials) + extra >= MAX_TRIALS

    def trial(self, factor: float, *, coarse: bool) -> Trial:
        """One factor, replayed again while uncertain (full trials only)."""
        runs: list[Path] = []
        while True:
            runs.append(self.run(factor, len(runs), coarse))
            t = self.judge(factor, runs)
            t.coarse = coarse
            if (
                coarse
                or t.verdict != "uncertain"
                or len(runs) > self.repeats
                or self.spent(len(runs))
                or not _decidable(t)
            ):
                break
            self.say(f"{factor:.4g}x: uncertain, replaying it again ({len(runs) + 1} runs pooled)")
        self.out.trials.append(t)
        self.say(f"{factor:.4g}x{' (coarse)' if coarse else ''}: {t.verdict} ({_line(t)})")
        if t.verdict == "client-bound":
            self.out.stopped = f"the client was the bottleneck at {factor:.4g}x (dispatch lag)"
        return t


def search(
    run: Run,
    judge: Judge,
    *,
    max_factor: float,
    precision: float,
    repeats: int = 2,
    say: Callable[[str], None] = lambda _: None,
) -> Search:
    """The capacity of the target for the judged objectives (module docstring)."""
    state = _State(run, judge, repeats, say)
    guess = _coarse(state, max_factor)
    passed, failed = _full(state, guess, max_factor, precision)
    out = state.out
    out.capacity, out.interval = passed, (passed, failed)
    full_fail = [t for t in out.trials if not t.coarse and t.factor == failed]
    out.broke_first = broke_first(full_fail[-1]) if full_fail else None
    return out


def _coarse(state: _State, max_factor: float) -> float:
    """Double (or halve) coarse trials from 1x until the verdict turns; the factor the
    bracket puts the limit at."""
    floor = 1.0 / max_factor
    below: Trial | None = None  # highest pass
    above: Trial | None = None  # lowest failure
    factor = 1.0
    while state.out.stopped is None and not state.spent():
        t = state.trial(factor, coarse=True)
        if t.verdict == "client-bound":
            break
        if t.verdict == "pass":
            below = t
            if above is not None or factor >= max_factor:
                break
            factor = min(factor * 2, max_factor)
        else:
            above = t
            if below is not None or factor <= floor:
                break
            factor = max(factor / 2, floor)
    if below is None:
        return floor if above is None else above.factor / 2 if above.factor > floor else floor
    if above is None:
        return below.factor
    state.order = _order(below, above)
    return _interpolate(below, above)


def _full(
    state: _State, guess: float, max_factor: float, precision: float
) -> tuple[float | None, float | None]:
    """Full trials from ``guess`` until one passes and one fails within ``precision``:
    each next factor aimed by how far the last missed (or cleared) its limit."""
    floor = 1.0 / max_factor
    below: Trial | None = None  # the highest full pass
    above: Trial | None = None  # the lowest full failure
    factor = min(max(guess, floor), max_factor)
    previous: Trial | None = None  # the full trial before this one
    streak = 0  # moves made from one side so far: each at least twice the last step
    while state.out.stopped is None and not state.spent():
        t = state.trial(factor, coarse=False)
        if t.verdict == "client-bound":
            break
        if t.verdict == "pass" and (below is None or factor > below.factor):
            below = t
        elif t.verdict != "pass" and (above is None or factor < above.factor):
            above = t
        if below is not None and above is not None:
            if above.factor / below.factor - 1 <= precision:
                break
            reach = _reach(above, below)
            if above.factor / below.factor - 1 <= reach:
                state.out.note = (
                    f"the window resolves the factor to about {reach:.0%} here: a trial "
                    f"between {below.factor:.3g}x and {above.factor:.3g}x would most likely "
                    "be uncertain too (a longer --window or more --repeats narrows it)"
                )
                break
            factor = _between(below, above, precision)
        elif below is not None:
            if below.factor >= max_factor:
                break
            factor = min(_aim(t, previous, (1 + precision) ** 2**streak, state.order), max_factor)
        else:
            assert above is not None
            if above.factor <= floor:
                break
            factor = max(_aim(t, previous, (1 + precision) ** 2**streak, state.order), floor)
        previous, streak = t, streak + 1
    return (below.factor if below else None), (above.factor if above else None)


ORDER = 2.0
"""How fast the binding figure is taken to grow with the factor, locally (value ~
factor^ORDER) when aiming from one side: a tail latency grows faster than the load
near saturation, so a miss by 4x is aimed at half the factor, not a quarter."""


def _aim(t: Trial, before: Trial | None, step: float, default: float) -> float:
    """From a trial (and the one before it, on the same side), the factor where the
    binding objective would meet its limit: at least ``step`` away (which doubles with
    each move from one side: a trial at its limit, uncertain, must not walk down in
    precision steps), at most 4x. Two trials give the local order (a secant step);
    one assumes ``default``."""
    order = _order(t, before, default)
    # Aimed where the trial would be decided the other way, not merely where its value
    # meets the limit (a trial there comes out uncertain): below a failure, where its
    # interval's top would; above a pass, where its interval's bottom would.
    g = _excess(t, "high" if t.verdict != "pass" else "low")
    if not math.isfinite(g):
        g = math.copysign(order * math.log(4), g)
    if t.verdict != "pass":
        g = max(g, 0.0)
        return t.factor * min(math.exp(-g / order), 1 / step)
    return t.factor * min(max(math.exp(-g / order), step), 4.0)


def _between(below: Trial, above: Trial, precision: float) -> float:
    """Inside a full bracket: interpolated, kept half a precision step from each end."""
    lo, hi = below.factor * (1 + precision / 2), above.factor / (1 + precision / 2)
    if lo >= hi:
        return math.sqrt(below.factor * above.factor)
    return min(max(_interpolate(below, above), lo), hi)


def _interpolate(below: Trial, above: Trial) -> float:
    """Where, between a pass and a failure, the binding objective's value crosses its
    limit: linear in log(value / limit) against log(factor), kept inside the bracket."""
    lo, hi = math.log(below.factor), math.log(above.factor)
    g_lo, g_hi = _excess(below), _excess(above)
    share = 0.5
    if g_lo < 0 < g_hi and math.isfinite(g_hi):
        share = -g_lo / (g_hi - g_lo)
    return math.exp(lo + min(max(share, 0.1), 0.9) * (hi - lo))


def _excess(t: Trial, end: str = "value") -> float:
    """log(value / limit) of the objective furthest over (or nearest) its limit; with
    ``end`` "low" or "high", of that end of the value's interval (the value where the
    interval is unknown)."""
    worst = -math.inf
    for c in t.checks:
        value = getattr(c, end) if getattr(c, end) is not None else c.value
        if value is None or c.limit is None:
            return math.inf
        if c.limit > 0 and value > 0:
            worst = max(worst, math.log(value / c.limit))
        elif value > c.limit:
            return math.inf
    return worst if worst > -math.inf else -1.0


def _half_widths(t: Trial) -> list[tuple[float, float]]:
    """For each uncertain objective: (half its interval's width, its value's distance
    from the limit), both in log(value)."""
    out = []
    for c in t.checks:
        ends = (c.value, c.low, c.high, c.limit)
        if c.verdict == "uncertain" and all(x is not None and x > 0 for x in ends):
            assert c.value and c.low and c.high and c.limit  # for mypy: all positive
            out.append((math.log(c.high / c.low) / 2, abs(math.log(c.value / c.limit))))
    return out


def _decidable(t: Trial) -> bool:
    """Whether one more run, pooled, may decide an uncertain trial: an interval narrows
    as sqrt(runs / (runs + 1)), so one whose value sits closer to the limit than that
    stays uncertain, and replaying it would only spend time. Unknown intervals: yes."""
    widths = _half_widths(t)
    shrink = math.sqrt(t.runs / (t.runs + 1))
    return not widths or any(half * shrink < gap for half, gap in widths)


def _reach(uncertain: Trial, other: Trial) -> float:
    """How far in factor an uncertain trial's interval reaches (relative): its widest
    half-width in log value over the local order (the secant to ``other``)."""
    widths = _half_widths(uncertain)
    if uncertain.verdict != "uncertain" or not widths:
        return 0.0
    return math.exp(max(h for h, _ in widths) / _order(uncertain, other)) - 1


def _order(t: Trial, other: Trial | None, default: float = ORDER) -> float:
    """The local order (value ~ factor^order) from two trials; ``default`` from one."""
    g = _excess(t)
    if other is None or other.factor == t.factor or not math.isfinite(g):
        return default
    if not math.isfinite(_excess(other)):
        return default
    slope = (_excess(other) - g) / math.log(other.factor / t.factor)
    return min(max(slope, 0.5), 8.0)


def _line(t: Trial) -> str:
    p99 = t.percentiles.get("latency", {}).get("p99")
    shown = "-" if p99 is None else f"{p99:,.0f} ms"
    return f"{t.requests:,} requests, P99 latency {shown}, errors {t.errors:,}"


def sweep(
    run: Run,
    judge: Judge,
    *,
    step: float,
    max_factor: float,
    repeats: int = 2,
    say: Callable[[str], None] = lambda _: None,
) -> Search:
    """The brute-force baseline: full replays at 1x, 1x + step, 1x + 2 steps, ... until
    one fails (or ``max``); no coarse trials, no aiming."""
    state = _State(run, judge, repeats, say)
    passed: float | None = None
    failed: float | None = None
    n = 0
    while state.out.stopped is None and not state.spent():
        factor = min(1.0 + n * step, max_factor)
        t = state.trial(factor, coarse=False)
        if t.verdict == "client-bound":
            break
        if t.verdict != "pass":
            failed = factor
            break
        passed, n = factor, n + 1
        if factor >= max_factor:
            break
    out = state.out
    out.capacity, out.interval = passed, (passed, failed)
    out.broke_first = broke_first(out.trials[-1]) if failed is not None else None
    return out
