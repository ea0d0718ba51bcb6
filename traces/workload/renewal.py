"""Renewal arrivals: independent gaps from a two-parameter family.

Weibull and Gamma are both fitted to the gaps by maximum likelihood and the one
with the higher log-likelihood is kept (shape < 1 is burstier than Poisson, > 1
more regular). A renewal process keeps the spread of single gaps but not their
correlation: see ``traces.hmm`` for traffic whose busy spells last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats  # type: ignore[import-untyped]

__all__ = ["Dist", "fit_gaps"]

Array = npt.NDArray[Any]
_POINT_SHAPE = 1e6
"""Shape standing for "always the same value" (a fixed-length benchmark, even spacing)."""


@dataclass(frozen=True)
class Dist:
    """A two-parameter distribution on (0, inf): ``weibull`` or ``gamma``."""

    family: str
    shape: float
    scale: float
    loglik: float | None = None
    ks: float | None = None
    """Kolmogorov-Smirnov distance to the data it was fitted to (0 is a perfect fit)."""

    @property
    def mean(self) -> float:
        if self.family == "weibull":
            return self.scale * math.gamma(1 + 1 / self.shape)
        return self.shape * self.scale

    def with_mean(self, mean: float) -> Dist:
        return Dist(self.family, self.shape, self.scale * mean / self.mean)

    def sample(self, rng: np.random.Generator, n: int) -> Array:
        if self.family == "weibull":
            out: Array = self.scale * rng.weibull(self.shape, n)
        else:
            out = rng.gamma(self.shape, self.scale, n)
        return out


def fit_gaps(gaps: Array) -> tuple[Dist, Dist]:
    """(the better fit, the other) of Weibull and Gamma to positive gaps."""
    weibull, gamma = _fit(stats.weibull_min, "weibull", gaps), _fit(stats.gamma, "gamma", gaps)
    if (gamma.loglik if gamma.loglik is not None else 0) > (
        weibull.loglik if weibull.loglik is not None else 0
    ):
        return gamma, weibull
    return weibull, gamma


def _fit(family: Any, name: str, values: Array) -> Dist:
    mean = float(values.mean())
    if float(values.std()) <= mean * 1e-9:
        # No spread: maximum likelihood has no optimum (scipy fails); a point mass is
        # what the data say, and both families reach it as the shape grows.
        scale = mean if name == "weibull" else mean / _POINT_SHAPE
        return Dist(name, _POINT_SHAPE, scale, None, 0.0)
    try:
        shape, _, scale = family.fit(values, floc=0)
    except (ValueError, RuntimeError, FloatingPointError):
        if name == "weibull":  # the other family is fitted too and will be kept
            return Dist(name, 1.0, mean, -math.inf, 1.0)
        var = float(values.var())  # Gamma by moments when the optimiser gives up
        shape, scale = mean * mean / var, var / mean
    frozen = family(shape, loc=0, scale=scale)
    loglik = float(np.sum(frozen.logpdf(values)))
    ks = float(stats.kstest(values, frozen.cdf).statistic)
    return Dist(name, float(shape), float(scale), loglik, ks)
