"""Request shapes: input and output tokens drawn together.

Prompt and answer lengths depend on each other (a long document asks for a
summary, a chat turn for a chat turn) and are often multi-modal (several
applications behind one endpoint), which one Gamma per column cannot hold. The
model is a mixture of bivariate normals on (log input, log output): each
component is one kind of request, its covariance the dependence within the kind.
The number of components (1 to ``MAX_COMPONENTS``) is chosen by BIC; samples are
rounded up to whole tokens and kept within the recorded range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats  # type: ignore[import-untyped]

__all__ = ["MAX_COMPONENTS", "Lengths", "fit_lengths"]

Array = npt.NDArray[Any]
MAX_COMPONENTS = 8
_ITERATIONS = 200
_TOLERANCE = 1e-6
FIT_POINTS = 20_000
"""Pairs the mixture is fitted to at most (a seeded random subset beyond that): eight
components of six parameters each are well determined by far fewer."""
_RIDGE = 1e-4
"""Added to each covariance's diagonal (log-token units): a column of one value
(a fixed-length benchmark) stays a valid, narrow component."""


@dataclass(frozen=True)
class Lengths:
    weights: list[float]
    means: list[list[float]]
    """Per component: mean of (log input tokens, log output tokens)."""
    covariances: list[list[list[float]]]
    min_input: int
    max_input: int
    min_output: int
    max_output: int
    ks_input: float
    ks_output: float
    """Kolmogorov-Smirnov distance between each column and a sample of the model."""

    @property
    def components(self) -> int:
        return len(self.weights)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[Array, Array]:
        """``n`` (input, output) token counts: whole, within the recorded range (so a
        benchmark's fixed lengths come back exactly)."""
        weights = np.array(self.weights)
        which = rng.choice(self.components, n, p=weights / weights.sum())  # summing to 1 exactly
        z = np.empty((n, 2))
        for j in range(self.components):
            at = which == j
            z[at] = rng.multivariate_normal(self.means[j], self.covariances[j], int(at.sum()))
        tokens = np.ceil(np.exp(np.minimum(z, 30.0)))
        inputs = np.clip(tokens[:, 0], self.min_input, self.max_input).astype(np.int64)
        outputs = np.clip(tokens[:, 1], self.min_output, self.max_output).astype(np.int64)
        return inputs, outputs

    def mean_tokens(self, rng: np.random.Generator) -> tuple[float, float]:
        inputs, outputs = self.sample(rng, 100_000)
        return float(inputs.mean()), float(outputs.mean())


def fit_lengths(inputs: Array, outputs: Array, rng: np.random.Generator) -> Lengths:
    """The mixture with the lowest BIC for paired token counts (each ≥ 1)."""
    pairs = np.column_stack([inputs, outputs]).astype(np.float64)
    if pairs.shape[0] > FIT_POINTS:
        pairs = pairs[rng.choice(pairs.shape[0], FIT_POINTS, replace=False)]
    x = np.log(pairs)
    best: tuple[float, Array, Array, Array] | None = None
    for k in range(1, MAX_COMPONENTS + 1):
        if k > 1 and x.shape[0] < 20 * k:
            break  # a component more needs twenty pairs more; one fits any ten
        w, mu, cov, ll = _em(x, k, rng)
        bic = -2 * ll + (k - 1 + 5 * k) * math.log(x.shape[0])
        if best is None or bic < best[0]:
            best = (bic, w, mu, cov)
    assert best is not None
    _, w, mu, cov = best
    model = Lengths(
        w.tolist(),
        mu.tolist(),
        cov.tolist(),
        int(inputs.min()),
        int(inputs.max()),
        int(outputs.min()),
        int(outputs.max()),
        0.0,
        0.0,
    )
    drawn_in, drawn_out = model.sample(rng, min(max(inputs.size, 10_000), 200_000))
    return replace(
        model,
        ks_input=float(stats.ks_2samp(inputs, drawn_in).statistic),
        ks_output=float(stats.ks_2samp(outputs, drawn_out).statistic),
    )


def _em(x: Array, k: int, rng: np.random.Generator) -> tuple[Array, Array, Array, float]:
    """Expectation-maximisation for a k-component Gaussian mixture, started from
    points spread by k-means++ seeding (deterministic for a given ``rng``)."""
    n = x.shape[0]
    mu = _seeds(x, k, rng)
    cov = np.repeat(np.cov(x.T)[None] + np.eye(2) * _RIDGE, k, axis=0)
    w = np.full(k, 1.0 / k)
    prev = -math.inf
    ll = -math.inf
    for _ in range(_ITERATIONS):
        logp = np.column_stack([np.log(w[j]) + _logpdf(x, mu[j], cov[j]) for j in range(k)])
        top = logp.max(1, keepdims=True)
        total = top[:, 0] + np.log(np.exp(logp - top).sum(1))
        ll = float(total.sum())
        r = np.exp(logp - total[:, None])
        nk = np.maximum(r.sum(0), 1e-9)
        w = nk / n
        mu = (r.T @ x) / nk[:, None]
        for j in range(k):
            d = x - mu[j]
            cov[j] = (r[:, j, None] * d).T @ d / nk[j] + np.eye(2) * _RIDGE
        if ll - prev < _TOLERANCE * abs(ll):
            break
        prev = ll
    return w, mu, cov, ll


def _logpdf(x: Array, mu: Array, cov: Array) -> Array:
    (a, b), (_, c) = cov
    det = a * c - b * b
    d0, d1 = x[:, 0] - mu[0], x[:, 1] - mu[1]
    quad = (c * d0 * d0 - 2 * b * d0 * d1 + a * d1 * d1) / det  # 2x2 inverse, written out
    out: Array = -0.5 * (quad + math.log(det) + 2 * math.log(2 * math.pi))
    return out


def _seeds(x: Array, k: int, rng: np.random.Generator) -> Array:
    centres = [x[rng.integers(x.shape[0])]]
    for _ in range(1, k):
        d2 = np.min([((x - c) ** 2).sum(1) for c in centres], axis=0)
        p = d2 / d2.sum() if d2.sum() > 0 else None
        centres.append(x[rng.choice(x.shape[0], p=p)])
    return np.array(centres)
