"""Whether a recording's request lengths drifted over its span.

A model fitted to a whole recording reproduces the length mix it saw on average; when
the traffic's mix moved during the recording (a long-document workload fading, a
new application arriving), the mix at its end (what comes next) differs from that
average, and a replay of the model carries the old mix: a held-out conversation trace
had mean input tokens of 12,935 in its first half and 11,250 in its second, so
synthetic arms carried 15-20% more prefill than the traffic they stood for.

The halves are compared on their mean input and output tokens. Each half's mean is
uncertain by more than a sample of independent requests would say (sessions and bursts
bring similar requests together), so its noise is taken from ``BLOCKS`` consecutive
blocks of the half: the standard error of their means. The halves differ when a
mean moved by more than ``SIGMAS`` of the two halves' combined noise and by at least
``LEAST_CHANGE`` of its first-half value (on a long recording a change of a percent
is beyond the noise, and no news).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BLOCKS", "LEAST_CHANGE", "SIGMAS", "LengthDrift", "length_drift"]

Array = npt.NDArray[Any]
BLOCKS = 10
SIGMAS = 3.0
LEAST_CHANGE = 0.05
MIN_PAIRS = 2 * BLOCKS * 5
"""Fewer pairs with lengths than this (five a block) are too few to tell drift from noise."""


@dataclass(frozen=True)
class LengthDrift:
    """Mean input and output tokens in the first and second half of the span, and how
    far each mean moved against the halves' noise."""

    input_means: list[float]
    """Mean input tokens: [first half, second half]."""
    output_means: list[float]
    input_noise: float
    """The change in mean input tokens that is within the halves' noise (``SIGMAS``
    combined standard errors), relative to the first half's mean."""
    output_noise: float

    @property
    def input_change(self) -> float:
        first, second = self.input_means
        return second / first - 1 if first > 0 else 0.0

    @property
    def output_change(self) -> float:
        first, second = self.output_means
        return second / first - 1 if first > 0 else 0.0

    @property
    def drifted(self) -> bool:
        """Either mean moved beyond its noise and by at least ``LEAST_CHANGE``."""
        return any(
            abs(change) > max(noise, LEAST_CHANGE)
            for change, noise in (
                (self.input_change, self.input_noise),
                (self.output_change, self.output_noise),
            )
        )

    def describe(self) -> str:
        """One line for ``traces fit``."""

        def one(name: str, means: list[float], change: float, noise: float) -> str:
            return (
                f"mean {name} tokens {means[0]:,.0f} -> {means[1]:,.0f} ({change:+.0%}, "
                f"noise ±{noise:.0%})"
            )

        verdict = (
            "the halves differ beyond their noise; `synth --lengths recent` draws from the "
            "second half"
            if self.drifted
            else "within noise"
        )
        return (
            "lengths, first half -> second: "
            + one("input", self.input_means, self.input_change, self.input_noise)
            + "; "
            + one("output", self.output_means, self.output_change, self.output_noise)
            + f": {verdict}"
        )


def length_drift(starts_ns: Array, inputs: Array, outputs: Array) -> LengthDrift | None:
    """The drift of the lengths of requests starting at ``starts_ns`` (in time order,
    each with both lengths), split at the middle of their span; None when either half
    holds too few requests to tell (``MIN_PAIRS`` in all)."""
    if starts_ns.size < MIN_PAIRS:
        return None
    middle = starts_ns[0] + (starts_ns[-1] - starts_ns[0]) / 2
    cut = int(np.searchsorted(starts_ns, middle, side="left"))
    if min(cut, starts_ns.size - cut) < MIN_PAIRS // 2:
        return None
    halves = [slice(0, cut), slice(cut, starts_ns.size)]
    in_means, in_se = zip(*(_mean_and_error(inputs[h]) for h in halves), strict=True)
    out_means, out_se = zip(*(_mean_and_error(outputs[h]) for h in halves), strict=True)
    return LengthDrift(
        input_means=list(in_means),
        output_means=list(out_means),
        input_noise=_noise(in_means[0], in_se),
        output_noise=_noise(out_means[0], out_se),
    )


def _mean_and_error(values: Array) -> tuple[float, float]:
    """The mean of ``values`` and its standard error from ``BLOCKS`` consecutive blocks."""
    blocks = np.array_split(values.astype(np.float64), BLOCKS)
    means = np.array([b.mean() for b in blocks])
    return float(values.mean()), float(means.std(ddof=1) / math.sqrt(BLOCKS))


def _noise(first_mean: float, errors: tuple[float, ...]) -> float:
    combined = math.sqrt(sum(e * e for e in errors))
    return SIGMAS * combined / first_mean if first_mean > 0 else 0.0
