"""Quantised clocks: traces whose timestamps were logged at a coarse resolution.

Many public traces floor arrival times to a tick (1 s, 3 s): most gaps between
consecutive requests are 0 and each tick's requests share one timestamp. The
replayer spreads each tick's requests over the tick (``replayer/ticks.py``); the
workload models fit counts per tick instead of gaps (``traces/workload/arrivals.py``).
Both take the tick from here.

The rule (``detect_ticks``), on the start times:

- the tick is the larger of two candidates — the most common non-zero gap, and
  the greatest common divisor of the non-zero gaps that are whole milliseconds —
  that is at least 1 ms and has at least 99% of the timestamps on one grid of it
  (so a few records from a finer clock do not hide the tick);
- the timestamps are *quantised* when such a tick exists and at least 10% of the
  gaps are 0: many requests share a tick, so its bursts are an artefact of the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_TICK_NS", "TIE_SHARE", "Clock", "Ticks", "detect", "detect_ticks"]

MIN_TICK_NS = 1_000_000
"""Finer steps than 1 ms are a clock's real resolution, not a logging tick."""
TIE_SHARE = 0.10
"""Quantised when at least this share of the gaps are 0."""
ON_GRID = 0.99
"""At least this share of the timestamps are on the tick's grid."""
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
    """The step every timestamp is a multiple of (from ``origin_ns``)."""
    origin_ns: int
    """A point of the grid: timestamps sit at ``origin_ns + k * tick_ns``."""
    ties: float
    """The share of gaps between consecutive start times that are 0."""

    @property
    def quantised(self) -> bool:
        return self.ties >= TIE_SHARE


def _sample_gaps(starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gaps between sorted start times, and the starts they came from: all of them,
    or for a large set windows spread over it (one sorted copy per window)."""
    n = starts.size
    if n <= _WINDOW * _WINDOWS:
        windows = [np.sort(starts)]
    else:
        firsts = np.linspace(0, n - _WINDOW, _WINDOWS).astype(np.int64)
        windows = [np.sort(starts[a : a + _WINDOW]) for a in firsts]
    gaps = np.concatenate([np.diff(w) for w in windows])
    return gaps, np.concatenate(windows)


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
    gaps, sample = _sample_gaps(starts.astype(np.int64, copy=False))
    nonzero = gaps[gaps > 0]
    if nonzero.size == 0:  # one instant: no step to find
        return None
    values, counts = np.unique(nonzero, return_counts=True)
    candidates = {int(values[np.argmax(counts)])}
    whole_ms = nonzero[nonzero % MIN_TICK_NS == 0]
    if whole_ms.size:
        candidates.add(int(np.gcd.reduce(whole_ms)))
    for tick in sorted(candidates, reverse=True):
        origin = _on_grid(tick, sample)
        if origin is not None:
            return Ticks(tick, origin, float(np.mean(gaps == 0)))
    return None


@dataclass(frozen=True)
class Clock:
    """The clock as a workload model keeps it (JSON-friendly seconds)."""

    tick_s: float | None
    """The resolution the timestamps were logged at when quantised, else None."""
    tie_share: float
    """Share of consecutive requests stamped at the same instant."""

    def describe(self) -> str:
        ties = f"{self.tie_share:.0%} of gaps are 0"
        if self.tick_s is None:
            return f"timestamps are not quantised ({ties})"
        return f"timestamps are quantised to {self.tick_s:g} s ticks ({ties})"


def detect(starts_ns: npt.NDArray[Any]) -> Clock:
    """The clock of sorted start times (ns)."""
    ties = float(np.mean(np.diff(starts_ns) == 0)) if starts_ns.size > 1 else 0.0
    ticks = detect_ticks(starts_ns)
    if ticks is None or not ticks.quantised:
        return Clock(None, ties)
    return Clock(ticks.tick_ns / 1e9, ticks.ties)
