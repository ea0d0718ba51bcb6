"""The capacity search: where between passing and failing the target's limit lies.

Two phases, so that most replays are short and the answer rests on full ones:

1. **Coarse**: a quarter of the window's span in replay time (``COARSE_SHARE``;
   more of the window at higher factors, so the load lasts as long at each) at 2x
   (``START``), then doubling while it passes (or halving while it fails) up to
   ``max``: a bracket. From 4x a coarse trial holds the whole window: it is a full
   trial, and its verdict counts. Shorter ones only aim the next phase.
2. **Full**: the whole window, first at the factor where the bracket puts the limit
   (interpolated on the binding objective's value over its limit, in log space,
   ``FIRST_MARGIN`` under it, so the trial is likely decided rather than
   uncertain), or at the failure's knee where that is lower (``_knee``: its factor
   times the share of requests the target kept up with). Each next factor is aimed
   from the last: below an uncertain trial, one ``precision`` step (its value is at
   the limit as near as the window resolves); below a failure or above a pass,
   where it would be decided the other way (its interval's far end at the limit), a
   miss by 4x taken as twice the factor (``ORDER``) unless two full trials (before
   them the coarse bracket) give the local order, and below a failure no higher
   than its knee; at least one step, the step doubling with each move of one kind.
   Once a full replay has passed and one has not, the next is interpolated between
   them, until they are within ``precision`` or within what the window resolves
   (``_reach``: nearer the limit than that, trials stay uncertain).

An uncertain trial is replayed only when pooling one more run can decide it
(``_decidable``) and a pass there would move the answer by more than ``precision``
(no full pass lies within a step below it). The capacity is the highest factor a
full replay passed; the interval is [that, the lowest factor a full replay did not
pass]. Coarse trials never set either.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

from tailreplay.report.capacity_result import Check, Search, Trial, broke_first, trial_line
from tailreplay.units import format_duration, round_factor

__all__ = ["COARSE_SHARE", "MAX_TRIALS", "search", "sweep"]

COARSE_SHARE = 0.25
MAX_TRIALS = 24
"""Whatever the precision asks, a search stops after this many replays (repeats count)."""

Run = Callable[[float, int, bool], Path]
"""``run(factor, attempt, coarse)``: replay the window (``COARSE_SHARE`` of its span in
replay time when coarse)."""
Judge = Callable[[float, list[Path]], Trial]


class _State:
    def __init__(
        self,
        run: Run,
        judge: Judge,
        repeats: int,
        say: Callable[[str], None],
        budget_s: float | None = None,
        precision: float = 0.05,
    ) -> None:
        self.run, self.judge, self.repeats, self.say = run, judge, repeats, say
        self.precision = precision
        self.out = Search()
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s if budget_s is not None else None
        self.order = ORDER
        """The order first aims assume: the coarse bracket's where it has one. Coarse
        values run low (short replays build shorter queues), but alike at both ends."""

    def spent(self, extra: int = 0) -> bool:
        """No replay more: ``MAX_TRIALS`` made, or the wall-clock ``--budget`` spent (the
        search then stops, as when the client gave out: what passed is a lower bound)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            if self.out.stopped is None:
                self.out.stopped = (
                    f"the --budget of {format_duration(self.budget_s or 0)} was spent"
                )
            return True
        return sum(t.runs for t in self.out.trials) + extra >= MAX_TRIALS

    def trial(
        self, factor: float, *, coarse: bool, below: Trial | None = None, precision: float = 0
    ) -> Trial:
        """One factor, replayed again while uncertain (full trials only), unless deciding
        it would move the answer by no more than ``precision``: ``below`` (the highest
        full pass) is within a step under it, and the window resolves the factor to
        that step. A coarse trial that holds the whole window (from
        ``1 / COARSE_SHARE``) is a full one."""
        factor = round_factor(factor, self.precision)
        coarse = coarse and factor * COARSE_SHARE < 1
        runs: list[Path] = []
        while True:
            runs.append(self.run(factor, len(runs), coarse))
            t = self.judge(factor, runs)
            t.coarse = coarse
            if (
                coarse
                or _settled(t, below, precision)
                or t.verdict != "uncertain"
                or len(runs) > self.repeats
                or self.spent(len(runs))
                or not _decidable(t)
            ):
                break
            self.say(f"{factor:g}x: uncertain, replaying it again ({len(runs) + 1} runs pooled)")
        self.out.trials.append(t)
        self.say(f"{factor:g}x{' (coarse)' if coarse else ''}: {t.verdict} ({trial_line(t)})")
        if t.verdict == "client-bound":
            self.out.stopped = f"the client was the bottleneck at {factor:g}x (dispatch lag)"
        return t


def search(
    run: Run,
    judge: Judge,
    *,
    max_factor: float,
    precision: float,
    min_factor: float | None = None,
    repeats: int = 2,
    say: Callable[[str], None] = lambda _: None,
    budget_s: float | None = None,
) -> Search:
    """The capacity of the target for the judged objectives (module docstring), tried
    from ``min_factor`` (default 1 / ``max_factor``) to ``max_factor``; no replay starts
    after ``budget_s`` of wall time."""
    state = _State(run, judge, repeats, say, budget_s, precision)
    floor = min_factor if min_factor is not None else 1.0 / max_factor
    guess = _coarse(state, floor, max_factor)
    passed, failed = _full(state, guess, floor, max_factor, precision)
    out = state.out
    out.capacity, out.interval = passed, (passed, failed)
    full_fail = [t for t in out.trials if not t.coarse and t.factor == failed]
    out.broke_first = broke_first(full_fail[-1]) if full_fail else None
    return out


START = 2.0
"""The first coarse factor. The question is headroom: from 2x a target that holds
it takes one replay less to bracket, one that cannot hold 1x one more."""


def _coarse(state: _State, floor: float, max_factor: float) -> float:
    """Double (or halve) from ``START`` until the verdict turns (from 4x the trials hold
    the whole window and are full ones); the factor the bracket puts the limit at."""
    below: Trial | None = None  # highest pass
    above: Trial | None = None  # lowest failure
    factor = min(max(START, floor), max_factor)
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
    # Aimed where the value sits FIRST_MARGIN under the limit, so the first full trial is
    # likely decided (a pass) rather than uncertain. Not the coarse pass's own interval:
    # a P99 of ~300 requests has its upper end at one of its two largest values, and
    # which one the bootstrap lands on moved this aim from 2.7x to 3.4x on one target.
    margin = _first_margin(below)
    aim = _interpolate(below, above, margin)
    # A cut failure's values are lower bounds, which on a sharp knee put the crossing
    # past it (a queue's 4x trial aimed 3.1x where its capacity was 2.5x); the rate the
    # target answered at says where the knee is.
    knee = _knee(above, below, margin)
    return min(aim, knee) if knee > below.factor else aim


FIRST_MARGIN = math.log(1.25)
"""How far under the limit (in log value) the first full trial is aimed: a window of a
few hundred requests measures its P99 to about +-20% (none where the trials carry no
interval: then the value is exact)."""


def _first_margin(passed: Trial | None) -> float:
    """``FIRST_MARGIN``, or 0 where the pass carries no interval (its value is exact)."""
    return FIRST_MARGIN if passed is not None and _upper_width(passed) > 0 else 0.0


def _full(
    state: _State, guess: float, floor: float, max_factor: float, precision: float
) -> tuple[float | None, float | None]:
    """Full trials from ``guess`` until one passes and one fails within ``precision``:
    each next factor aimed by how far the last missed (or cleared) its limit."""
    full = [t for t in state.out.trials if not t.coarse and t.verdict != "client-bound"]
    # The highest full pass and the lowest full failure, the coarse phase's included.
    below = max((t for t in full if t.verdict == "pass"), key=_factor, default=None)
    above = min((t for t in full if t.verdict != "pass"), key=_factor, default=None)
    factor = min(max(guess, floor), max_factor)
    previous: Trial | None = None  # the last full trial of this phase
    streak = -1  # aimed moves made so far (the first trial is the coarse phase's aim)
    while state.out.stopped is None and not state.spent():
        if below is not None and above is not None:
            reach = _reach(above, below)
            if _within(below.factor, above.factor, max(precision, reach)):
                if reach > precision:
                    state.out.note = (
                        f"the window resolves the factor to about {reach:.0%} here: trials "
                        f"this near the limit come out uncertain, so above {below.factor:g}x "
                        "it is known only to that (a longer --window or more --repeats "
                        "narrows it)"
                    )
                break
            if previous is not None:  # else the coarse phase's aim, already between
                factor = _between(below, above, precision)
        elif (below is not None and below.factor >= max_factor) or (
            above is not None and above.factor <= floor
        ):
            break  # passes at the max, or fails at the floor: nothing further to try
        elif previous is not None:  # one side only: aimed from the last trial
            step = (1 + precision) ** 2**streak
            factor = _aim(previous, _before(state, previous), step, state.order)
            passed = _highest_pass(state, previous.factor)
            knee = _knee(previous, passed, _first_margin(passed))
            factor = min(max(min(factor, knee), floor), max_factor)
        t = state.trial(factor, coarse=False, below=below, precision=precision)
        if t.verdict == "client-bound":
            break
        if t.verdict == "pass" and (below is None or factor > below.factor):
            below = t
        elif t.verdict != "pass" and (above is None or factor < above.factor):
            above = t
        # The step doubles over moves of one kind only: after failures, the first
        # uncertain trial is stepped below by one step, not by the failures' doubled one.
        streak = streak + 1 if previous is None or previous.verdict == t.verdict else 0
        previous = t
    return (below.factor if below else None), (above.factor if above else None)


SATURATED = 0.9
"""A trial whose target answered less than this share of the requests sent to it
(``Trial.served``, the second half of the sending) was past its knee."""


def _knee(t: Trial, below: Trial | None, margin: float = 0.0) -> float:
    """The highest factor a failure past its knee puts within the limit (``margin``
    under it, in log); inf where the target kept up, or it is unknown.

    A queue's server answers at its own rate however fast it is sent, so the knee (where
    the queue starts to grow) is the trial's factor times the share it answered. Past
    the knee the queue grows for the whole replay: at factor f the last requests wait
    (f / knee - 1) * span / f longer than at the knee, ``span`` being the window's at
    1x. So a latency limit ``headroom`` seconds above the value at the knee (taken as
    the highest pass's, ``below``) holds up to f = 1 / (1 / knee - headroom / span):
    2.49x on the benchmark's queue (knee 2.28x, a 30 s window, 1.1 s of headroom),
    where 2.49x passed and 2.74x failed."""
    if t.verdict != "fail" or t.served is None or t.served >= SATURATED:
        return math.inf
    knee = t.factor * t.served
    headroom, span = _headroom_s(t, below, margin), t.factor * (t.sending_s or 0.0)
    if headroom <= 0 or span <= 0:
        return knee
    inverse = 1 / knee - headroom / span
    return 1 / inverse if inverse > 0 else math.inf


_WAITED = ("latency:", "ttft:")
"""Objectives that a request's wait in a queue adds to, second for second."""


def _headroom_s(failed: Trial, below: Trial | None, margin: float) -> float:
    """Seconds between the pass's value of the failure's binding objective and its
    limit (``margin`` under it, in log), where that objective is a latency or TTFT
    percentile (0 otherwise)."""
    binding = broke_first(failed)
    if below is None or binding is None or not binding.startswith(_WAITED):
        return 0.0
    check = next((c for c in below.checks if c.objective == binding), None)
    if check is None or check.value is None or check.limit is None:
        return 0.0
    return max(check.limit * math.exp(-margin) - check.value, 0.0) / 1000


def _highest_pass(state: _State, under: float) -> Trial | None:
    """The highest trial (coarse ones too) that passed below ``under``."""
    passes = [t for t in state.out.trials if t.verdict == "pass" and t.factor < under]
    return max(passes, key=_factor, default=None)


def _factor(t: Trial) -> float:
    return t.factor


def _before(state: _State, t: Trial) -> Trial | None:
    """The full trial before ``t``."""
    full = [x for x in state.out.trials if not x.coarse]
    i = next(i for i in range(len(full) - 1, -1, -1) if full[i] is t)
    return full[i - 1] if i > 0 else None


def _settled(t: Trial, below: Trial | None, precision: float) -> bool:
    """An uncertain trial with a full pass within a step below it, in a window that
    resolves the factor to that step: whichever way it went, the answer would move by
    no more than the precision."""
    return (
        below is not None
        and _within(below.factor, t.factor, precision)
        and _reach(t, below) <= precision
    )


def _within(low: float, high: float, precision: float) -> bool:
    """``high`` is at most ``precision`` above ``low`` (a step of exactly the precision
    counts, whatever the float rounding)."""
    return high <= low * (1 + precision) * (1 + 1e-9)


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
    if t.verdict == "uncertain":
        # Its value is at the limit, as near as the window resolves: one step down
        # either passes (and the bracket is one step wide) or shows the window cannot
        # resolve the step.
        return t.factor / step
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
    """Inside a full bracket: one precision step above the pass where the value's
    crossing of its limit lies within two (whatever that trial shows, the bracket
    closes or moves a step up to it); elsewhere at the crossing (no higher than the
    failure's knee), an interval's half-width under the limit (a trial at the
    crossing itself would most likely be uncertain). Kept half a precision step from
    each end."""
    lo, hi = below.factor * (1 + precision / 2), above.factor / (1 + precision / 2)
    if lo >= hi:
        return math.sqrt(below.factor * above.factor)
    # Rounded down, as the trial will be: a step up by the precision closes the bracket.
    step = round_factor(below.factor * (1 + precision), precision, down=True)
    # The failure's knee, where it was past one, bounds the crossing from above: its
    # value, cut short, only bounds it from below.
    knee = _knee(above, below, _upper_width(below))
    if min(_interpolate(below, above, keep=0.0), knee) <= step * (1 + precision):
        return min(step, hi)
    return min(max(min(_interpolate(below, above, _upper_width(below), keep=0.0), knee), lo), hi)


def _interpolate(below: Trial, above: Trial, margin: float = 0.0, keep: float = 0.1) -> float:
    """Where, between a pass and a failure, the binding objective's value crosses its
    limit (``margin`` under it, in log): linear in log(value / limit) against
    log(factor), at least ``keep`` of the bracket (in log) from each end."""
    lo, hi = math.log(below.factor), math.log(above.factor)
    g_lo, g_hi = _excess(below) + margin, _excess(above) + margin
    share = 0.5
    if g_lo >= 0 and math.isfinite(g_lo):
        share = 0.0  # a pass at its limit: the limit is there
    elif g_lo < 0 < g_hi and math.isfinite(g_hi):
        share = -g_lo / (g_hi - g_lo)
    return math.exp(lo + min(max(share, keep), 1 - keep) * (hi - lo))


def _upper_width(t: Trial) -> float:
    """How far, in log, the binding objective's interval reaches above its value (0:
    unknown): how far under the limit a value must be for the trial to pass."""
    scored = [(x, c) for c in t.checks if (x := _check_excess(c)) is not None]
    if not scored:
        return 0.0
    binding = max(scored, key=lambda xc: xc[0])[1]
    if not binding.value or not binding.high or binding.value <= 0:
        return 0.0
    return max(math.log(binding.high / binding.value), 0.0)


def _check_excess(c: Check, end: str = "value") -> float | None:
    """log(value / limit) of one objective (inf: unmeasured, or over a limit of 0);
    None where neither is positive and the value is within the limit (nothing to
    scale). With ``end`` "low" or "high", of that end of the value's interval (the
    value where the interval is unknown)."""
    value = getattr(c, end) if getattr(c, end) is not None else c.value
    if value is None or c.limit is None:
        return math.inf
    if c.limit > 0 and value > 0:
        return math.log(value / c.limit)
    return math.inf if value > c.limit else None


def _excess(t: Trial, end: str = "value") -> float:
    """``_check_excess`` of the objective furthest over (or nearest) its limit; -1
    where no objective has one."""
    scored = [x for c in t.checks if (x := _check_excess(c, end)) is not None]
    return max(scored, default=-1.0)


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
    """The local order (value ~ factor^order) from two trials; ``default`` from one, or
    where either was cut short (``--slo-stop``: its value is a lower bound)."""
    g = _excess(t)
    if other is None or other.factor == t.factor or not math.isfinite(g) or t.cut or other.cut:
        return default
    if not math.isfinite(_excess(other)):
        return default
    slope = (_excess(other) - g) / math.log(other.factor / t.factor)
    return min(max(slope, 0.5), 8.0)


def sweep(
    run: Run,
    judge: Judge,
    *,
    step: float,
    max_factor: float,
    repeats: int = 2,
    say: Callable[[str], None] = lambda _: None,
    budget_s: float | None = None,
) -> Search:
    """The brute-force baseline: full replays at 1x, 1x + step, 1x + 2 steps, ... until
    one fails (or ``max``); no coarse trials, no aiming."""
    state = _State(run, judge, repeats, say, budget_s, step)
    passed: float | None = None
    failed: float | None = None
    n = 0
    while state.out.stopped is None and not state.spent():
        factor = min(1.0 + n * step, max_factor)
        t = state.trial(factor, coarse=False)
        if t.verdict == "client-bound":
            break
        if t.verdict != "pass":
            failed = t.factor
            break
        passed, n = t.factor, n + 1
        if factor >= max_factor:
            break
    out = state.out
    out.capacity, out.interval = passed, (passed, failed)
    out.broke_first = broke_first(out.trials[-1]) if failed is not None else None
    return out
