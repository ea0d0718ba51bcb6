"""A jittered clock's tick: timestamps logged on a coarse tick, each up to
``JITTER`` of a tick off its grid point (a 3 s clock stamping 2,997 to 3,003 ms
apart; each tick's requests sharing one stamp, or each request its own).

Found in three steps (``jittered_tick``):

1. candidates: the non-zero steps between sorted timestamps, clustered (a step's
   error is two timestamps' jitter); a cluster of at least 5% of the steps is a
   candidate, the largest first;
2. a candidate holds when 90% of the steps are near a whole number of it
   (0 included: two stamps of one tick, each jittered on its own). Steps, not
   timestamps, are judged here: a record from a finer clock spoils two steps
   where the tick has one, so a few of them must not hide the tick;
3. the grid: each timestamp numbered by its tick (the steps' rounded ticks,
   summed, so a stray record does not shift the numbers after it), then tick and
   phase fitted to the numbers by least squares on the timestamps near the line
   (twice: the first fit finds the strays). 99% of the timestamps must sit within
   ``JITTER`` of a tick from the fitted grid; the jitter is the 99th percentile of
   their distances from it.

Large sets are sampled in windows (``clock._sample``): each window is numbered on
its own and the windows share one tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["JITTER", "jittered_tick"]

Array = npt.NDArray[Any]

JITTER = 0.01
"""A timestamp within this share of a tick from a grid point is on it (the loggers
seen jitter by 0.1%)."""
ON_GRID = 0.99
"""At least this share of the timestamps sit within ``JITTER`` of the grid."""
STEPS_NEAR = 0.90
"""At least this share of the steps are near a whole number of ticks."""
CLUSTER_SHARE = 0.05
"""A cluster of steps that is a candidate tick holds at least this share of them."""
MIN_STEPS = 20
MIN_TICK_NS = 1_000_000


def jittered_tick(windows: Sequence[Array], nonzero: Array) -> tuple[int, int, int] | None:
    """(tick, origin, jitter) in ns of sorted start-time ``windows``, whose non-zero
    steps are ``nonzero``; or None."""
    steps = np.sort(nonzero[nonzero >= MIN_TICK_NS].astype(np.float64))
    if steps.size < MIN_STEPS:
        return None
    breaks = np.flatnonzero(steps[1:] > steps[:-1] * (1 + 2 * JITTER)) + 1
    centres = [
        float(np.median(c)) for c in np.split(steps, breaks) if c.size >= CLUSTER_SHARE * steps.size
    ]
    for centre in sorted(centres, reverse=True):
        k = np.round(steps / centre)
        if np.mean(np.abs(steps - k * centre) <= 2 * JITTER * centre) < STEPS_NEAR:
            continue
        grid = _grid(centre, windows)
        if grid is not None:
            return grid
    return None


def _grid(tick: float, windows: Sequence[Array]) -> tuple[int, int, int] | None:
    """The grid of ``tick`` fitted to the windows (module docstring, step 3)."""
    rel = [(w - w[0]).astype(np.float64) for w in windows]
    numbers = [np.concatenate(([0.0], np.cumsum(np.round(np.diff(r) / tick)))) for r in rel]
    starts = [float(np.median(r - n * tick)) for r, n in zip(rel, numbers, strict=True)]
    for _ in range(2):
        off = [r - s - n * tick for r, s, n in zip(rel, starts, numbers, strict=True)]
        on = [np.abs(o) <= JITTER * tick for o in off]
        fitted = _fit(rel, numbers, on)
        if fitted is None:
            return None
        tick, starts = fitted
    dist = np.abs(
        np.concatenate([r - s - n * tick for r, s, n in zip(rel, starts, numbers, strict=True)])
    )
    near = dist <= JITTER * tick
    if np.mean(near) < ON_GRID:
        return None
    jitter = int(np.quantile(dist[near], 0.99))
    return round(tick), int(windows[0][0]) + round(starts[0]), jitter


def _fit(
    rel: list[Array], numbers: list[Array], on: list[Array]
) -> tuple[float, list[float]] | None:
    """One tick and each window's phase by least squares over the ``on`` timestamps
    (time against tick number); None when they span fewer than two ticks."""
    sxy = sxx = 0.0
    means = []
    for r, n, o in zip(rel, numbers, on, strict=True):
        if not o.any():
            means.append((0.0, 0.0))
            continue
        x, y = n[o], r[o]
        mx, my = float(x.mean()), float(y.mean())
        sxy += float(((x - mx) * (y - my)).sum())
        sxx += float(((x - mx) ** 2).sum())
        means.append((mx, my))
    if sxx <= 0:
        return None
    tick = sxy / sxx
    return tick, [my - tick * mx for mx, my in means]
