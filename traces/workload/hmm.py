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

import bisect
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln  # type: ignore[import-untyped]

__all__ = ["MAX_STATES", "Mmpp", "fit_mmpps", "stationary"]

Array = npt.NDArray[Any]
MAX_STATES = 6
_ITERATIONS = 200
_SOJOURN_BATCH = 4096
"""Uniforms drawn at a time for the chain's sojourns."""
_TOLERANCE = 1e-6
"""Stop when an iteration raises the log-likelihood by less than this share."""
_FLOOR = 1e-290
"""The smallest entry, relative to its product's largest, that the blocked
forward-backward accepts where some path reaches: below it a double nears
underflow (2.2e-308) and loses precision."""


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
        return stationary(np.array(self.transitions))

    @property
    def mean_rate(self) -> float:
        return float(self.stationary() @ np.array(self.rates))

    def _path(self, rng: np.random.Generator, bins: int, state: int) -> tuple[Array, int]:
        """The state of each of ``bins`` bins from ``state``, and the state to go on
        from. Each sojourn's length and next state are read from uniforms drawn in
        batches (the geometric by inversion, the next state by its cumulative
        shares), so a fast chain costs a few float operations a sojourn."""
        a = np.array(self.transitions)
        stay = np.clip(np.diag(a), 0.0, 1.0).tolist()
        leave = a - np.diag(np.diag(a))
        # a sojourn is 1 + floor(log(u) / log(stay)) bins, u uniform on (0, 1]
        log_stay = [math.log(s) if s > 0 else -math.inf for s in stay]
        cumulative = [np.cumsum(row).tolist() for row in leave]
        states: list[int] = []
        runs: list[int] = []
        t = 0
        uniforms: list[float] = []
        while t < bins:
            if len(uniforms) < 2:
                batch = min(_SOJOURN_BATCH, bins - t + 1)  # a sojourn is a bin at least
                uniforms = (1.0 - rng.random(2 * batch)).tolist()
            u, v = uniforms.pop(), 1.0 - uniforms.pop()  # v on [0, 1)
            slope = log_stay[state]  # 0 for a state that never leaves
            run = 1 + int(math.log(u) / slope) if slope else bins - t
            states.append(state)
            runs.append(min(run, bins - t))
            if t + run > bins:
                break  # memoryless: the next call goes on in this state
            t += run
            shares = cumulative[state]
            if shares[-1] > 0:
                state = bisect.bisect_right(shares, v * shares[-1])
        return np.repeat(np.array(states, dtype=np.int64), runs), state

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
        out, _, state = self.draw(rng, bins, exposure, state)
        return out, state

    def draw(
        self, rng: np.random.Generator, bins: int, exposure: Array | None, state: int | None
    ) -> tuple[Array, Array, int]:
        """``counts``, with the state of each bin: (counts, states, the state to go on from)."""
        if state is None:
            state = int(rng.choice(self.states, p=self.stationary()))
        path, state = self._path(rng, bins, state)
        mean = np.array(self.rates)[path] * self.bin_s
        if exposure is not None:
            mean = mean * exposure
        out: Array = rng.poisson(mean)
        return out, path, state

    def posteriors(self, counts: Array, exposure: Array | None = None) -> Array:
        """Each bin's probability of being in each state, given the counts of all
        bins (forward-backward): ``(bins, states)``, each row summing to 1."""
        n = counts.astype(np.float64)
        f = np.ones_like(n) if exposure is None else exposure.astype(np.float64)
        lam = np.maximum(np.array(self.rates) * self.bin_s, 1e-300)
        logb = _log_emissions(n, f, lam, gammaln(n + 1))
        gamma, _, _ = _forward_backward(logb, np.array(self.transitions), np.array(self.initial))
        return gamma


def stationary(transitions: Array) -> Array:
    """The long-run share of bins spent in each state of the chain ``transitions``."""
    w, v = np.linalg.eig(transitions.T)
    p = np.abs(np.real(v[:, np.argmin(np.abs(w - 1))]))
    out: Array = p / p.sum()
    return out


def _log_emissions(n: Array, f: Array, lam: Array, log_factorials: Array) -> Array:
    """Each bin's log-probability of its count ``n`` in each state: Poisson of the
    state's mean a bin ``lam`` times the bin's exposure ``f``."""
    out: Array = n[:, None] * np.log(lam[None, :] * f[:, None]) - lam[None, :] * f[:, None]
    return out - log_factorials[:, None]


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
    at = (np.arange(k) + 0.5) / k
    lam = np.quantile(per_bin, at) + 1e-3
    if k > 1 and np.unique(np.round(lam, 6)).size < k:
        # Sparse counts (mostly empty bins, rare bursts) put several quantiles on one
        # level: start from the quantiles of the distinct levels instead, so a bursty
        # trace is not held to fewer states than its counts show.
        levels = np.unique(np.round(per_bin, 6))
        if levels.size < k:
            return None  # the counts do not have k distinct levels to start from
        lam = np.quantile(levels, at) + 1e-3
    a = np.full((k, k), 0.05 / max(k - 1, 1))
    np.fill_diagonal(a, 0.95 if k > 1 else 1.0)
    pi = np.full(k, 1.0 / k)
    const = gammaln(n + 1)
    prev = -math.inf
    ll = -math.inf
    for _ in range(_ITERATIONS):
        logb = _log_emissions(n, f, lam, const)
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
    """State posteriors per bin, expected transition counts, and the log-likelihood.

    The recursions run over blocks of about sqrt(bins) bins side by side, so a fit
    costs a few numpy steps per block length rather than a Python step a bin. Each
    block's product of transition matrices ``a * b[t]`` gives the forward and
    backward vectors at the block edges; from them every block runs the scaled
    recursion itself, bin by bin, at once. A transition learned as 0, or nearly,
    can push an entry of a block's product that a path reaches towards underflow,
    where it would lose precision; the recursion over all bins in turn answers
    then instead."""
    shift = logb.max(1, keepdims=True)
    b = np.exp(logb - shift)
    first = pi * b[0]
    blocks = _blocked(a[None, :, :] * b[1:, None, :])  # [blk, j] carries its bin on
    products = _block_products(blocks)
    if products is None or not first.sum() > 0:
        return _forward_backward_stepwise(b, a, pi, float(shift.sum()))
    bins = b.shape[0]
    alpha, scales = _forward(first / first.sum(), blocks, products)
    beta = _backward(blocks, products)
    ll = math.log(first.sum()) + float(np.log(scales).sum() + shift.sum())
    return _posteriors(alpha[:bins], beta[:bins], b, a, ll)


def _blocked(mats: Array) -> Array:
    """``mats`` as (blocks, steps, k, k), about as many blocks as steps, the last
    padded with identities (which carry every vector on unchanged)."""
    n, k = mats.shape[0], mats.shape[1]
    steps = max(math.isqrt(max(n - 1, 0)) + 1, 1)
    count = max(-(-n // steps), 1)
    out = np.broadcast_to(np.eye(k), (count * steps, k, k)).copy()
    out[:n] = mats
    return out.reshape(count, steps, k, k)


def _block_products(blocks: Array) -> Array | None:
    """Each block's product of its matrices in order, each divided by its largest
    entry as it grows; None when an entry that a path reaches falls below
    ``_FLOOR``, near underflow, where it would lose precision or become 0 (a leak
    of 1e-300 between two states, which later bins can make the likeliest path)."""
    product = blocks[:, 0].copy()
    reached = (product > 0).astype(np.float64)  # the entries some path makes positive
    for j in range(blocks.shape[1]):
        if j:
            product = product @ blocks[:, j]
            reached = np.minimum(reached @ (blocks[:, j] > 0), 1.0)
        top = product.max((1, 2))
        if not (top > 0).all():
            return None
        product /= top[:, None, None]
        if (product[reached > 0] < _FLOOR).any():
            return None
    return product


def _forward(start: Array, blocks: Array, products: Array) -> tuple[Array, Array]:
    """The forward vectors of every bin, each summing to 1, and the sums they were
    divided by (whose logs add up to the likelihood's)."""
    count, steps, k = blocks.shape[0], blocks.shape[1], blocks.shape[2]
    edges = np.empty((count, k))
    x = start
    for blk in range(count):
        edges[blk] = x
        x = x @ products[blk]
        x /= x.sum()
    alpha = np.empty((count, steps, k))
    scales = np.empty((count, steps))
    xs = edges
    for j in range(steps):
        xs = np.einsum("bi,bij->bj", xs, blocks[:, j])
        scales[:, j] = xs.sum(1)
        xs /= scales[:, j, None]
        alpha[:, j] = xs
    return np.vstack([start, alpha.reshape(-1, k)]), scales


def _backward(blocks: Array, products: Array) -> Array:
    """The backward vectors of every bin, each at its own scale."""
    count, steps, k = blocks.shape[0], blocks.shape[1], blocks.shape[2]
    edges = np.empty((count, k))
    y = np.ones(k)
    for blk in range(count - 1, -1, -1):
        edges[blk] = y
        y = products[blk] @ y
        y /= y.sum()
    beta = np.empty((count, steps, k))
    ys = edges
    for j in range(steps - 1, -1, -1):
        ys = np.einsum("bij,bj->bi", blocks[:, j], ys)
        ys /= ys.sum(1, keepdims=True)
        beta[:, j] = ys
    return np.vstack([beta.reshape(-1, k), np.ones((1, k))])


def _forward_backward_stepwise(
    b: Array, a: Array, pi: Array, shift: float
) -> tuple[Array, Array, float]:
    """The scaled recursion a bin at a time, on ``b`` (the emissions divided by each
    bin's largest, whose logs sum to ``shift``)."""
    t_len, k = b.shape
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
    return _posteriors(alpha, beta, b, a, float(np.log(scale).sum() + shift))


def _posteriors(
    alpha: Array, beta: Array, b: Array, a: Array, ll: float
) -> tuple[Array, Array, float]:
    """Posteriors from the forward probabilities ``alpha`` (each bin's summing to 1)
    and the backward ones ``beta`` (each bin's at any scale): a transition's share
    in each bin is normalised over that bin's transitions, so no scale carries."""
    gamma = alpha * beta
    gamma /= gamma.sum(1, keepdims=True)
    ahead = b[1:] * beta[1:]
    ahead /= np.maximum(ahead.max(1, keepdims=True), 1e-300)
    # Each bin's transitions as a k x k matrix normalised to sum to 1: a share of
    # small by small, which stays finite where dividing by the bin's (perhaps
    # denormal) total first would overflow. A bin no transition can reach adds none.
    moves = alpha[:-1, :, None] * a[None, :, :] * ahead[:, None, :]
    total = moves.sum((1, 2))
    seen = total > 0
    xi = (moves[seen] / total[seen, None, None]).sum(0)
    return gamma, xi, ll
