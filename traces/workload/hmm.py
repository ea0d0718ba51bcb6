"""A Markov-modulated Poisson process on binned counts: fitting and simulation.

The traffic is in one of K hidden states, each with its own rate; the state may
change between bins of ``bin_s`` seconds (a Markov chain), and the count in a bin
is Poisson with the state's rate times an exposure (the rate curve of ``--profile``,
or 1). Rush minutes, lulls and bursts are states with their own rates and sojourn
times, so the model keeps both the spread of counts and how long it lasts: the
index of dispersion at long windows, which a renewal process of independent gaps
cannot have. Fitted by expectation-maximisation (Baum-Welch, scaled forward-
backward) for each K up to ``MAX_STATES``; ``traces.arrivals`` picks K by
the burstiness each reproduces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln  # type: ignore[import-untyped]

__all__ = ["MAX_STATES", "Mmpp", "fit_mmpps"]

Array = npt.NDArray[Any]
MAX_STATES = 6
_ITERATIONS = 200
_TOLERANCE = 1e-6
"""Stop when an iteration raises the log-likelihood by less than this share."""


@dataclass(frozen=True)
class Mmpp:
    bin_s: float
    rates: list[float]
    """Each state's arrival rate, requests per second."""
    transitions: list[list[float]]
    """Row i: the probabilities of the next bin's state, from state i."""
    initial: list[float]
    loglik: float
    bic: float

    @property
    def states(self) -> int:
        return len(self.rates)

    def stationary(self) -> Array:
        """The long-run share of bins spent in each state."""
        a = np.array(self.transitions)
        w, v = np.linalg.eig(a.T)
        p = np.abs(np.real(v[:, np.argmin(np.abs(w - 1))]))
        out: Array = p / p.sum()
        return out

    @property
    def mean_rate(self) -> float:
        return float(self.stationary() @ np.array(self.rates))

    def scaled(self, factor: float) -> Mmpp:
        """The traffic of ``factor`` independent copies of this one, as one MMPP: the
        mean rate times ``factor`` and each state's departure from it times
        sqrt(factor), so the index of dispersion is kept ("five times the users",
        not "five times louder in sync"). A state pushed below 0 stays at 0."""
        mean = self.mean_rate
        rates = [max(factor * mean + math.sqrt(factor) * (r - mean), 0.0) for r in self.rates]
        return Mmpp(self.bin_s, rates, self.transitions, self.initial, self.loglik, self.bic)

    def counts(
        self, rng: np.random.Generator, bins: int, exposure: Array | None, state: int | None
    ) -> tuple[Array, int]:
        """Arrivals in each of ``bins`` consecutive bins, from ``state`` (None: drawn
        from the stationary shares); returns them and the state to go on from.

        The chain is drawn a sojourn at a time (a geometric number of bins in each
        state), so a slow chain costs its state changes, not its bins; the sojourn is
        memoryless, so one cut at the end of ``bins`` goes on unchanged."""
        a = np.array(self.transitions)
        stay = np.clip(np.diag(a), 0.0, 1.0)
        leave = a - np.diag(np.diag(a))
        if state is None:
            state = int(rng.choice(self.states, p=self.stationary()))
        path = np.empty(bins, dtype=np.int64)
        t = 0
        while t < bins:
            run = bins - t if stay[state] >= 1 else int(rng.geometric(1 - stay[state]))
            path[t : t + run] = state
            if t + run > bins:
                break  # memoryless: the next call goes on in this state
            t += run
            out_of = leave[state].sum()
            if out_of > 0:
                state = int(rng.choice(self.states, p=leave[state] / out_of))
        mean = np.array(self.rates)[path] * self.bin_s
        if exposure is not None:
            mean = mean * exposure
        out: Array = rng.poisson(mean)
        return out, state


def fit_mmpps(counts: Array, bin_s: float, exposure: Array | None = None) -> list[Mmpp]:
    """MMPPs of 1 to ``MAX_STATES`` states fitted to ``counts`` (fewer when the counts
    have fewer distinct levels); each carries its log-likelihood and BIC."""
    counts = counts.astype(np.float64)
    f = np.ones_like(counts) if exposure is None else exposure.astype(np.float64)
    fits = []
    for k in range(1, MAX_STATES + 1):
        model = _fit_k(counts, f, k, bin_s)
        if model is None:
            break
        fits.append(model)
    return fits


def _fit_k(n: Array, f: Array, k: int, bin_s: float) -> Mmpp | None:
    per_bin = n / f
    lam = np.quantile(per_bin, (np.arange(k) + 0.5) / k) + 1e-3
    if k > 1 and np.unique(np.round(lam, 6)).size < k:
        return None  # the counts do not have k distinct levels to start from
    a = np.full((k, k), 0.05 / max(k - 1, 1))
    np.fill_diagonal(a, 0.95 if k > 1 else 1.0)
    pi = np.full(k, 1.0 / k)
    const = gammaln(n + 1)
    prev = -math.inf
    ll = -math.inf
    for _ in range(_ITERATIONS):
        logb = n[:, None] * np.log(lam[None, :] * f[:, None]) - lam[None, :] * f[:, None]
        logb -= const[:, None]
        gamma, xi, ll = _forward_backward(logb, a, pi)
        # A state no window belongs to has no exposure: keep its rate finite, not 0/0.
        exposure = np.maximum((gamma * f[:, None]).sum(0), 1e-300)
        lam = np.maximum((gamma * n[:, None]).sum(0) / exposure, 1e-9)
        a = xi / np.maximum(xi.sum(1, keepdims=True), 1e-300)
        pi = gamma[0]
        if ll - prev < _TOLERANCE * abs(ll):
            break
        prev = ll
    order = np.argsort(lam)  # states from the quietest: a stable, readable model
    lam, a, pi = lam[order], a[np.ix_(order, order)], pi[order]
    params = k + k * (k - 1) + (k - 1)
    bic = -2 * ll + params * math.log(n.size)
    return Mmpp(bin_s, (lam / bin_s).tolist(), a.tolist(), pi.tolist(), float(ll), float(bic))


def _forward_backward(logb: Array, a: Array, pi: Array) -> tuple[Array, Array, float]:
    """State posteriors per bin, expected transition counts, and the log-likelihood."""
    t_len, k = logb.shape
    shift = logb.max(1, keepdims=True)
    b = np.exp(logb - shift)
    alpha = np.empty((t_len, k))
    scale = np.empty(t_len)
    x = pi * b[0]
    for t in range(t_len):
        if t:
            x = (alpha[t - 1] @ a) * b[t]
        s = x.sum()
        scale[t] = s
        alpha[t] = x / s
    beta = np.empty((t_len, k))
    beta[-1] = 1.0
    for t in range(t_len - 2, -1, -1):
        beta[t] = (a @ (b[t + 1] * beta[t + 1])) / scale[t + 1]
    gamma = alpha * beta
    gamma /= gamma.sum(1, keepdims=True)
    nxt = (b[1:] * beta[1:]) / scale[1:, None]
    xi = a * (alpha[:-1].T @ nxt)
    ll = float(np.log(scale).sum() + shift.sum())
    return gamma, xi, ll
