"""Quantised clocks: traces whose timestamps were logged at a coarse resolution.

Many public traces floor arrival times to a tick (1 s, 3 s): most gaps between
consecutive requests are 0 and each tick's requests share one timestamp. The
replayer spreads each tick's requests over the tick (``replayer/ticks.py``); the
workload models fit counts per tick instead of gaps (``traces/workload/arrivals.py``).
Both take the tick from here.

The rule (``detect_ticks``), on the start times:

- an *exact* tick is the larger of two candidates — the most common non-zero gap,
  and the greatest common divisor of the non-zero gaps that are whole
  milliseconds — that is at least 1 ms and has at least 99% of the timestamps on
  one grid of it (so a few records from a finer clock do not hide the tick);
- a *jittered* tick allows each timestamp to sit up to ``JITTER`` (1%) of a tick
  from its grid point, as real loggers write them (a 3 s clock whose ticks come
  2,997 to 3,003 ms apart): ``clock_jitter.py`` finds it. On such a log every gap
  is a whole number of milliseconds, so the exact rule finds a 1 ms tick; the
  jittered one wins when it is longer. An exact clock with a few stamps within
  1% of a tick off its grid is jittered too (``_near_misses``);
- the timestamps are *quantised* when such a tick exists and at least 10% of the
  gaps are 0: many requests share a tick, so its bursts are an artefact of the clock.

Whatever counts per tick (the schedule's spreading, the fit's windows) takes each
timestamp's tick from ``Ticks.grid``: its grid point when within the jitter, so a
tick stamped 2,999 ms does not fall into the tick before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.traces.workload.clock_jitter import JITTER, ON_GRID, jittered_tick

__all__ = [
    "JITTER",
    "MIN_TICK_NS",
    "TIE_SHARE",
    "Clock",
    "Ticks",
    "clock_of",
    "detect",
    "detect_ticks",
    "on_ticks",
    "snap",
]

MIN_TICK_NS = 1_000_000
"""Finer steps than 1 ms are a clock's real resolution, not a logging tick."""
TIE_SHARE = 0.10
"""Quantised when at least this share of the gaps are 0."""
MIN_GAPS = 20
"""Fewer gaps than this decide nothing."""
_WINDOW = 65_536
_WINDOWS = 16
"""Large sets are judged on this many windows of _WINDOW consecutive records (1M
starts: 8 MB of sorted copies, whatever the archive's length)."""


@dataclass(frozen=True)
class Ticks:
    """What the start times say about the clock that logged them."""

    tick_ns: int
    """The step between the grid's points."""
    origin_ns: int
    """A point of the grid: timestamps sit at ``origin_ns + k * tick_ns``."""
    ties: float
    """The share of gaps between consecutive start times that are 0."""
    jitter_ns: int = 0
    """How far the timestamps on the grid sit from its points (the 99th percentile);
    0 for an exact clock."""

    @property
    def quantised(self) -> bool:
        return self.ties >= TIE_SHARE

    @property
    def tolerance_ns(self) -> int:
        """How far from a grid point a timestamp may sit and still be on it."""
        return int(JITTER * self.tick_ns) if self.jitter_ns else 0

    def grid(self, start_ns: int) -> int:
        """The start of the tick ``start_ns`` was logged in: its grid point when within
        the clock's jitter of one (a tick stamped early belongs to the next point),
        else the grid point before it (a finer clock's record, floored)."""
        off = (start_ns - self.origin_ns) % self.tick_ns
        if self.tick_ns - off <= self.tolerance_ns:
            return start_ns + (self.tick_ns - off)
        return start_ns - off


def snap(starts_ns: npt.NDArray[Any], ticks: Ticks) -> npt.NDArray[Any]:
    """``Ticks.grid`` of every start time (int64 ns)."""
    starts = starts_ns.astype(np.int64, copy=False)
    off = (starts - ticks.origin_ns) % ticks.tick_ns
    early = ticks.tick_ns - off <= ticks.tolerance_ns
    out: npt.NDArray[Any] = np.where(early, starts + (ticks.tick_ns - off), starts - off)
    return out


def _sample(starts: np.ndarray) -> list[np.ndarray]:
    """Sorted start times: all of them, or for a large set windows spread over it
    (one sorted copy per window)."""
    n = starts.size
    if n <= _WINDOW * _WINDOWS:
        return [np.sort(starts)]
    firsts = np.linspace(0, n - _WINDOW, _WINDOWS).astype(np.int64)
    return [np.sort(starts[a : a + _WINDOW]) for a in firsts]


def _on_grid(tick: int, sample: np.ndarray) -> int | None:
    """The grid's phase if ``tick`` is at least 1 ms and at least 99% of the sampled
    starts sit on one grid of it (the most common remainder); else None."""
    if tick < MIN_TICK_NS:
        return None
    phases, counts = np.unique(sample % tick, return_counts=True)
    best = int(np.argmax(counts))
    return int(phases[best]) if counts[best] >= ON_GRID * sample.size else None


def detect_ticks(starts: np.ndarray) -> Ticks | None:
    """The tick the start times (ns) were logged at, or None when they have none ≥ 1 ms.

    >>> s = 1_700_000_000 * 10**9 + 3 * 10**9 * np.array([0, 0, 0, 1, 1, 2] * 5).cumsum()
    >>> detect_ticks(s).tick_ns
    3000000000
    """
    if starts.size <= MIN_GAPS:
        return None
    windows = _sample(starts.astype(np.int64, copy=False))
    gaps = np.concatenate([np.diff(w) for w in windows])
    sample = np.concatenate(windows)
    nonzero = gaps[gaps > 0]
    if nonzero.size == 0:  # one instant: no step to find
        return None
    exact = _exact_tick(nonzero, sample)
    jittered = jittered_tick(windows, nonzero)
    ties = float(np.mean(gaps == 0))
    if jittered is not None and (exact is None or jittered[0] > exact[0] * (1 + JITTER)):
        return Ticks(jittered[0], jittered[1], ties, max(jittered[2], 1))
    if exact is None:
        return None
    return Ticks(*exact, ties, _near_misses(*exact, sample))


def _near_misses(tick: int, origin: int, sample: np.ndarray) -> int:
    """How far the stamps off an exact grid but within ``JITTER`` of a tick of it sit
    (the largest such distance), or 0: a clock exact but for a few early stamps is
    jittered, and an early stamp belongs to the next grid point, not the one before."""
    off = (sample - origin) % tick
    dist = np.minimum(off, tick - off)
    near = dist[(dist > 0) & (dist <= JITTER * tick)]
    return int(near.max()) if near.size else 0


def _exact_tick(nonzero: np.ndarray, sample: np.ndarray) -> tuple[int, int] | None:
    """(tick, origin) of the largest exact candidate with 99% of ``sample`` on its grid."""
    values, counts = np.unique(nonzero, return_counts=True)
    candidates = {int(values[np.argmax(counts)])}
    whole_ms = nonzero[nonzero % MIN_TICK_NS == 0]
    if whole_ms.size:
        candidates.add(int(np.gcd.reduce(whole_ms)))
    for tick in sorted(candidates, reverse=True):
        origin = _on_grid(tick, sample)
        if origin is not None:
            return tick, origin
    return None


@dataclass(frozen=True)
class Clock:
    """The clock as a workload model keeps it (JSON-friendly seconds)."""

    tick_s: float | None
    """The resolution the timestamps were logged at when quantised, else None."""
    tie_share: float
    """Share of consecutive requests stamped at the same instant."""
    jitter_s: float = 0.0
    """How far the timestamps sit from the tick's grid (``Ticks.jitter_ns``)."""

    def describe(self) -> str:
        ties = f"{self.tie_share:.0%} of gaps are 0"
        if self.tick_s is None:
            return f"timestamps are not quantised ({ties})"
        jitter = f"jitter {_duration(self.jitter_s)}, " if self.jitter_s else ""
        return f"timestamps are quantised to {self.tick_s:g} s ticks ({jitter}{ties})"


def _duration(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1 else f"{seconds * 1e3:.3g} ms"


def on_ticks(starts_ns: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], Clock]:
    """Sorted start times (int64 ns) and their clock. When the clock is quantised,
    each start is its tick's number times the clock's ``tick_s`` from the first
    tick: what counts requests per window then counts them per real tick, not per
    jittered stamp, and a window of 3 s holds one tick of a 2.999994 s estimate."""
    starts = np.sort(starts_ns.astype(np.int64, copy=False))
    ticks = detect_ticks(starts)
    clock = clock_of(starts, ticks)
    if ticks is not None and clock.tick_s is not None:
        snapped = snap(starts, ticks)  # order kept: the grid is monotone
        number = np.round((snapped - snapped[0]) / ticks.tick_ns).astype(np.int64)
        starts = starts[0] + number * round(clock.tick_s * 1e9)
    return starts, clock


def detect(starts_ns: npt.NDArray[Any]) -> Clock:
    """The clock of sorted start times (ns)."""
    ticks = detect_ticks(starts_ns)
    return clock_of(starts_ns, ticks)


def clock_of(starts_ns: npt.NDArray[Any], ticks: Ticks | None) -> Clock:
    """The clock of sorted start times (ns) whose ticks are ``ticks``."""
    ties = float(np.mean(np.diff(starts_ns) == 0)) if starts_ns.size > 1 else 0.0
    if ticks is None or not ticks.quantised:
        return Clock(None, ties)
    return Clock(_tick_s(ticks.tick_ns), ticks.ties, ticks.jitter_ns / 1e9)


def _tick_s(tick_ns: int) -> float:
    """The tick in seconds as the log's clock has it: a fitted tick within a tenth
    of ``JITTER`` of a round value (three significant digits: 3 s, 0.25 s, 10 s) is
    that value, so that windows of whole ticks stay whole (a least-squares
    2,999,994,000 ns, or a clock running 0.01% fast, is a 3 s clock); else the
    fitted tick, to the microsecond."""
    seconds = tick_ns / 1e9
    nominal = float(f"{seconds:.3g}")
    if abs(seconds - nominal) <= JITTER / 10 * nominal:
        return nominal
    return round(seconds, 6)
