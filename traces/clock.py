"""Quantised clocks: traces whose timestamps were logged at a coarse resolution.

Many public traces stamp requests to the second or coarser, so many requests
share each tick and most gaps are 0. A gap model then sees a point mass at 0,
and a replay would send each tick as one burst. ``detect`` finds the tick: the
largest of the usual resolutions that at least 99% of the timestamps (relative to
the first) are whole multiples of, when at least 10% of the gaps are ties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_TIES", "Clock", "detect"]

MIN_TIES = 0.10
"""Share of zero gaps from which a trace's clock counts as quantised."""
_ON_TICK = 0.99
_TICKS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 250, 500, 1000, 2000, 3000, 5000,
             10_000, 15_000, 30_000, 60_000)  # fmt: skip


@dataclass(frozen=True)
class Clock:
    tick_s: float | None
    """The resolution the timestamps were logged at, or None: not quantised."""
    tie_share: float
    """Share of consecutive requests stamped at the same instant."""

    def describe(self) -> str:
        ties = f"{self.tie_share:.0%} of gaps are 0"
        if self.tick_s is None:
            return f"timestamps are not quantised ({ties})"
        return f"timestamps are quantised to {self.tick_s:g} s ticks ({ties})"


def detect(starts_ns: npt.NDArray[Any]) -> Clock:
    """The clock of sorted start times (ns)."""
    if starts_ns.size < 3:
        return Clock(None, 0.0)
    ties = float(np.mean(np.diff(starts_ns) == 0))
    if ties < MIN_TIES:
        return Clock(None, ties)
    offsets = starts_ns - starts_ns[0]
    tick = None
    for ms in _TICKS_MS:
        if np.mean(offsets % (ms * 1_000_000) == 0) >= _ON_TICK:
            tick = ms / 1e3
    return Clock(tick, ties)
