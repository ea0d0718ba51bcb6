"""The estimators a calibration uses, each on plain arrays (so each is tested alone on
synthetic data with known parameters).

- ``batch_sizes``: how many requests were decoding at given instants: those whose
  decode phase (first token to last) spans it.
- ``with_prefill``: which inter-token gaps shared their engine step with another
  request's prefill (that request's first token came at the step's end).
- ``fit_decode``: the decode step's cost against the batch: the median clean gap at
  each batch size, then a least-squares line through those medians, weighted by how
  many gaps each median stands on (squared).
- ``fit_prefill``: the prefill cost against the tokens computed: a quantile
  regression on the lower envelope of each request's prefill step.
- ``fit_block_size``: the prefix cache's block from the cached-token counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import optimize, sparse  # type: ignore[import-untyped]

__all__ = [
    "DECODE_MIN_GAPS",
    "DECODE_MIN_SIZES",
    "PREFILL_QUANTILE",
    "LineFit",
    "batch_sizes",
    "decode_steps",
    "fit_block_size",
    "fit_decode",
    "fit_prefill",
    "prefill_steps",
    "prefills_ending",
    "step_times",
    "with_prefill",
]

Array = npt.NDArray[Any]

DECODE_MIN_GAPS = 20
"""A batch size enters the decode fit when at least this many clean gaps saw it."""
DECODE_MIN_SIZES = 3
"""Batch sizes the decode line needs (two would fit any two medians exactly)."""
PREFILL_QUANTILE = 0.2
"""The lower envelope's quantile: the line 20% of the prefill times lie below."""
PREFILL_MAX_POINTS = 5_000
"""Requests the quantile regression takes at most (an even subsample, by prompt size,
beyond): its linear programme takes about a second at that size."""
BLOCK_MIN_HITS = 5
"""Answers with cached tokens needed before their common divisor says a block size."""


@dataclass(frozen=True)
class LineFit:
    """``y = base + slope * x``, fitted on ``points`` points spanning ``x_range``."""

    base: float
    slope: float
    points: int
    x_range: tuple[float, float]


def batch_sizes(first: Array, last: Array, at: Array) -> Array:
    """How many of the intervals ``[first, last)`` hold each instant of ``at``.

    >>> batch_sizes(np.array([0.0, 1.0]), np.array([2.0, 3.0]), np.array([1.5, 2.5])).tolist()
    [2, 1]
    """
    ok = ~(np.isnan(first) | np.isnan(last))
    starts, ends = np.sort(first[ok]), np.sort(last[ok])
    inside: Array = np.searchsorted(starts, at, "right") - np.searchsorted(ends, at, "right")
    return inside


def prefills_ending(end: Array, window: Array, first_tokens: Array) -> Array:
    """How many first tokens came within ``window / 2`` of each instant of ``end``.

    A request's first token comes at the end of the engine step that finished its
    prefill, received together with every other token of that step; the next step
    ends a whole step later. So the first tokens within half a step of a step's end
    are the prefills that shared that step.
    """
    firsts = np.sort(first_tokens[~np.isnan(first_tokens)])
    lo = np.searchsorted(firsts, end - window / 2, "right")
    hi = np.searchsorted(firsts, end + window / 2, "left")
    counts: Array = hi - lo
    return counts


def with_prefill(gap_start: Array, gap: Array, first_tokens: Array) -> Array:
    """Which gaps (a token at ``gap_start``, the next ``gap`` later) ended with another
    request's first token: that request's prefill ran in the same engine step, so the
    gap is a prefill plus a decode.

    >>> with_prefill(np.array([0.0, 1.0]), np.array([1.0, 1.0]), np.array([1.02])).tolist()
    [True, False]
    """
    mask: Array = prefills_ending(gap_start + gap, gap, first_tokens) > 0
    return mask


def fit_decode(batch: Array, gap_ms: Array, min_count: int = DECODE_MIN_GAPS) -> LineFit | None:
    """The decode step time against the batch size, from clean gaps (no prefill in
    their step; gaps of 0 — tokens read together — left out by the caller).

    The median gap at each batch size seen by at least ``min_count`` gaps is that
    size's step time (a median: a few gaps stretched by the network or the client
    move it little); a least-squares line through the medians, each squared residual
    weighted by its count squared, gives ``decode_base_ms`` (intercept) and
    ``decode_per_seq_ms`` (slope). The square makes the rare batch sizes at the load's
    peak, where a busy client or engine runs late, count little: on replays against
    the simulator it halved the slope's error against weights of the count.
    None when fewer than ``DECODE_MIN_SIZES`` batch sizes have enough gaps.
    """
    sizes, counts = np.unique(batch, return_counts=True)
    keep = sizes[(counts >= min_count) & (sizes > 0)]
    if len(keep) < DECODE_MIN_SIZES:
        return None
    medians = np.array([np.median(gap_ms[batch == s]) for s in keep])
    weights = np.array([np.sum(batch == s) for s in keep], dtype=float)
    slope, base = np.polyfit(keep.astype(float), medians, 1, w=weights)
    return LineFit(float(base), float(slope), int(weights.sum()), (float(keep[0]), float(keep[-1])))


def decode_steps(batch: Array, gap_ms: Array, min_count: int = DECODE_MIN_GAPS) -> list[float]:
    """The median clean gap at each batch size from 1, up to the first size seen by
    fewer than ``min_count`` gaps: the step times as measured (``decode_steps_ms``),
    where the line through them is the model's beyond.

    >>> decode_steps(np.array([1, 1, 2, 2, 4, 4]), np.array([10.0, 12, 20, 22, 40, 40]), 2)
    [11.0, 21.0]
    """
    decoding = batch > 0  # batch 0 (nothing decoding) is no step size
    batch, gap_ms = batch[decoding], gap_ms[decoding]
    order = np.argsort(batch, kind="stable")
    sizes, starts, counts = np.unique(batch[order], return_index=True, return_counts=True)
    steps: list[float] = []
    for size, start, count in zip(sizes, starts, counts, strict=True):
        if size != len(steps) + 1 or count < min_count:
            break
        steps.append(float(np.median(gap_ms[order[start : start + count]])))
    return steps


def step_times(base: float, slope: float, steps: Sequence[float], batch: Array) -> Array:
    """A decode step's time at each of ``batch`` (sizes of 1 and more), as
    ``EngineProfile.decode_ms`` times one: the measured ``steps`` where they reach, on
    from the last by ``slope``; the line ``base + slope * batch`` without them.

    >>> step_times(1.0, 10.0, [14.0, 28.0], np.array([1, 2, 4])).tolist()
    [14.0, 28.0, 48.0]
    """
    batch = np.asarray(batch, dtype=float)
    if not steps:
        line: Array = base + slope * batch
        return line
    table = np.asarray(steps)
    known = np.clip(batch, 1, len(table)).astype(int) - 1
    out: Array = table[known] + slope * np.maximum(batch - len(table), 0)
    return out


def prefill_steps(tokens: Array, chunk: int) -> Array:
    """Steps a prefill of ``tokens`` takes when a step computes ``chunk`` at most."""
    steps: Array = np.maximum(np.ceil(tokens / chunk), 1)
    return steps


def fit_prefill(
    tokens: Array, prefill_ms: Array, chunk: int, quantile: float = PREFILL_QUANTILE
) -> LineFit | None:
    """The prefill cost against the prompt tokens computed, from each request's
    prefill time (its first token's step, less that step's decode).

    A request's prefill time is its cost plus whatever shared its step (other
    prefills that came in the same step, a late admission): only ever more. So the
    fit is the lower envelope: the quantile regression (at ``quantile``) of the time
    on ``steps * base + tokens * per_token``, where ``steps`` is how many chunks of
    ``chunk`` tokens the prompt took (each step pays the base). Its slope is
    ``prefill_per_token_ms``, its intercept ``prefill_base_ms``. None with fewer
    than 10 requests or one prompt size.
    """
    ok = ~np.isnan(prefill_ms) & (tokens > 0)
    x, y = tokens[ok].astype(float), prefill_ms[ok]
    if len(x) < 10 or x.min() == x.max():
        return None
    if len(x) > PREFILL_MAX_POINTS:
        order = np.argsort(x, kind="stable")
        pick = order[np.linspace(0, len(x) - 1, PREFILL_MAX_POINTS).astype(int)]
        x, y = x[pick], y[pick]
    steps = prefill_steps(x, chunk)
    base, per_token = _quantile_line(np.column_stack([steps, x]), y, quantile)
    return LineFit(base, per_token, len(x), (float(x.min()), float(x.max())))


def _quantile_line(design: Array, y: Array, q: float) -> tuple[float, float]:
    """Coefficients ``b`` minimising the pinball loss of ``y - design @ b`` at ``q``, as
    a linear programme: ``y = design @ b + u - v`` with ``u, v >= 0``, minimise
    ``q * sum(u) + (1 - q) * sum(v)``."""
    n, k = design.shape
    cost = np.concatenate([np.zeros(k), np.full(n, q), np.full(n, 1 - q)])
    eq = np.hstack([design, np.eye(n), -np.eye(n)]) if n <= 2000 else None
    bounds = [(None, None)] * k + [(0, None)] * (2 * n)
    if eq is None:
        eq = sparse.hstack([design, sparse.eye(n), -sparse.eye(n)]).tocsc()
    solved = optimize.linprog(cost, A_eq=eq, b_eq=y, bounds=bounds, method="highs")
    if not solved.success:
        raise ArithmeticError(f"the quantile regression failed: {solved.message}")
    return float(solved.x[0]), float(solved.x[1])


def fit_block_size(cached: Array) -> int | None:
    """The prefix cache's block size: the greatest common divisor of the cached-token
    counts answers reported (a cache hit is whole blocks), from at least
    ``BLOCK_MIN_HITS`` hits; 1 means hits of any length (a radix cache). None with
    fewer hits."""
    hits = cached[cached > 0]
    if len(hits) < BLOCK_MIN_HITS:
        return None
    return math.gcd(*(int(h) for h in np.unique(hits)))
