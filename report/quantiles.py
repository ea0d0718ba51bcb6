"""Percentiles with bootstrap confidence intervals, and a log histogram for long series.

The bootstrap is exact in distribution and costs no resampling. Resampling n values
with replacement and sorting gives order statistics X*(k) = x[floor(n * U(k))], where
U(k), the k-th smallest of n uniforms, is Beta(k, n - k + 1); the next one up is
U(k) + (1 - U(k)) * Beta(1, n - k). So a replicate of numpy's interpolated percentile
needs two beta draws, not a resample of n values: 2,000 replicates of P99 over a
million latencies take milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.traces.results.figures import PERCENTILES

__all__ = ["QUANTILES", "Estimate", "estimates"]

QUANTILES: dict[str, float] = PERCENTILES  # the ones `traces stats` shows
DRAWS = 2000
LEVEL = 0.95

Array = npt.NDArray[Any]


@dataclass(frozen=True, slots=True)
class Estimate:
    value: float
    low: float | None
    """Lower end of the 95% bootstrap interval; None without one (histogram estimates)."""
    high: float | None


def estimates(
    values: Array,
    which: Mapping[str, float] = QUANTILES,
    *,
    rng: np.random.Generator | None = None,
    draws: int = DRAWS,
) -> dict[str, Estimate] | None:
    """Named percentiles of ``values`` with 95% bootstrap intervals; None when empty."""
    n = int(values.size)
    if n == 0:
        return None
    rng = rng if rng is not None else np.random.default_rng(0)
    ordered = np.sort(values.astype(np.float64, copy=False))
    # One call for every percentile: numpy partitions the values once, not once each.
    at: Array = np.percentile(ordered, list(which.values())) if which else np.zeros(0)
    out = {}
    for (name, pct), point in zip(which.items(), at, strict=True):
        value = float(point)
        if n == 1:
            out[name] = Estimate(value, value, value)
            continue
        replicates = _replicates(ordered, pct / 100.0, rng, draws)
        tail = (1.0 - LEVEL) / 2 * 100
        low, high = np.percentile(replicates, [tail, 100 - tail])
        out[name] = Estimate(value, float(low), float(high))
    return out


def _replicates(ordered: Array, q: float, rng: np.random.Generator, draws: int) -> Array:
    """Bootstrap replicates of numpy's linear-interpolation percentile q of ``ordered``."""
    n = ordered.size
    h = (n - 1) * q
    k = int(np.floor(h))  # 0-based order statistic below the percentile
    frac = h - k
    u_k = rng.beta(k + 1, n - k, size=draws)
    low = ordered[np.minimum((u_k * n).astype(np.int64), n - 1)]
    if frac == 0.0 or k + 1 >= n:
        return low
    u_next = u_k + (1.0 - u_k) * rng.beta(1, n - k - 1, size=draws)
    high = ordered[np.minimum((u_next * n).astype(np.int64), n - 1)]
    result: Array = low + frac * (high - low)
    return result
