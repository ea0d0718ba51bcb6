"""Request shapes: input and output tokens drawn together.

Prompt and answer lengths depend on each other (a long document asks for a
summary, a chat turn for a chat turn) and are often multi-modal (several
applications behind one endpoint), which one Gamma per column cannot hold. The
model is a mixture of bivariate normals on (log input, log output): each
component is one kind of request, its covariance the dependence within the kind.
The number of components (1 to ``MAX_COMPONENTS``) is chosen by BIC; samples are
rounded up to whole tokens and kept within the recorded range.

Where the arrivals are an MMPP, each of its states may draw the components in
shares of its own (``state_weights``): the requests that came in the busy states
of Azure's 2023 conversation trace asked for 29% fewer output tokens than those of
its quiet state (180 against 252), and a burst that carried the quiet state's
requests would overstate the tail. A synthesis draws each request's component
from its arrival state's shares (``draw``).
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
PRIOR_REQUESTS = 20.0
"""Requests' worth of the whole's shares each state's shares start from."""
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
    state_weights: list[list[float]] | None = None
    """Per arrival state (the MMPP's, quietest first): the components' shares among
    the requests that arrived in it; None: every state draws ``weights``."""

    @property
    def components(self) -> int:
        return len(self.weights)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[Array, Array]:
        """``n`` (input, output) token counts: whole, within the recorded range (so a
        benchmark's fixed lengths come back exactly)."""
        return self.draw(rng.random(n), rng.standard_normal((n, 2)))

    def draw(self, u: Array, z: Array, states: Array | None = None) -> tuple[Array, Array]:
        """Token counts from uniforms ``u`` (which component) and standard normal pairs
        ``z`` (where in it), one each a request: the component drawn from the shares
        of each request's arrival state (``states``), or from ``weights``. The same
        ``u`` and ``z`` give the same request wherever the shares pick the same
        component, so arms that differ in their arrivals share their draws."""
        if states is not None and self.state_weights is not None:
            shares = np.array(self.state_weights)[states]
        else:
            shares = np.broadcast_to(np.array(self.weights), (u.size, self.components))
        cumulative = np.cumsum(shares, axis=1)
        # The last share ends at the total, so rounding never leaves u past every one.
        which = np.minimum(
            (u[:, None] * cumulative[:, -1:] >= cumulative).sum(1), self.components - 1
        )
        means, lower = np.array(self.means), _cholesky(np.array(self.covariances))
        x = means[which] + np.einsum("nij,nj->ni", lower[which], z)
        tokens = np.ceil(np.exp(np.minimum(x, 30.0)))
        inputs = np.clip(tokens[:, 0], self.min_input, self.max_input).astype(np.int64)
        outputs = np.clip(tokens[:, 1], self.min_output, self.max_output).astype(np.int64)
        return inputs, outputs

    def means_by_state(self, n: int = 20_000) -> list[tuple[float, float]]:
        """Each arrival state's mean (input, output) tokens, from ``n`` seeded draws
        (the same for every state); empty without ``state_weights``."""
        if self.state_weights is None:
            return []
        rng = np.random.default_rng(0)
        u, z = rng.random(n), rng.standard_normal((n, 2))
        out = []
        for state in range(len(self.state_weights)):
            inputs, outputs = self.draw(u, z, np.full(n, state))
            out.append((float(inputs.mean()), float(outputs.mean())))
        return out

    def densities(self, inputs: Array, outputs: Array) -> Array:
        """Each request's density under each component, each row divided by its
        largest (``(n, components)``): what the components say of it, not their weights."""
        x = np.log(np.column_stack([inputs, outputs]).astype(np.float64))
        logp = np.column_stack(
            [
                _logpdf(x, np.array(mu), np.array(cov))
                for mu, cov in zip(self.means, self.covariances, strict=True)
            ]
        )
        out: Array = np.exp(logp - logp.max(1, keepdims=True))
        return out

    def by_state(self, densities: Array, posteriors: Array) -> Lengths:
        """These lengths with each arrival state's shares of the components, fitted by
        expectation-maximisation to the requests' ``densities`` given each one's
        probability of each state (``posteriors``). In a state, a request's component
        is weighed by that state's shares, not the whole's: where components overlap,
        a state of long answers does not lend the short component its stray requests.
        Each state starts from, and is shrunk towards, ``weights`` by
        ``PRIOR_REQUESTS``, so a state that held few requests draws about as the
        whole does."""
        prior = np.array(self.weights)
        held = posteriors.sum(0)
        shares = np.repeat(prior[None, :], posteriors.shape[1], axis=0)
        for _ in range(_ITERATIONS):
            counts = np.empty_like(shares)
            for state, row in enumerate(shares):
                weighted = densities * row[None, :]
                r = weighted / np.maximum(weighted.sum(1, keepdims=True), 1e-300)
                counts[state] = posteriors[:, state] @ r
            new = (counts + PRIOR_REQUESTS * prior[None, :]) / (held + PRIOR_REQUESTS)[:, None]
            new /= new.sum(1, keepdims=True)
            done = np.abs(new - shares).max() < _TOLERANCE
            shares = new
            if done:
                break
        return replace(self, state_weights=shares.tolist())


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


def _cholesky(cov: Array) -> Array:
    """Lower triangular factors of 2x2 covariances (``(k, 2, 2)``), written out; the
    off-diagonal is read as the mean of its two entries, as a symmetric matrix has."""
    a = cov[:, 0, 0]
    b = (cov[:, 0, 1] + cov[:, 1, 0]) / 2
    l00 = np.sqrt(a)
    l10 = b / l00
    l11 = np.sqrt(np.maximum(cov[:, 1, 1] - l10 * l10, 0.0))
    out = np.zeros_like(cov)
    out[:, 0, 0], out[:, 1, 0], out[:, 1, 1] = l00, l10, l11
    return out


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
