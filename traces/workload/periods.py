"""The recording's own periods at a rate: an MMPP conditioned on running at a mean
rate other than its own.

A fitted MMPP asked for another rate can be read two ways. ``Mmpp.scaled`` reads it
as more (or fewer) independent users: every state's rate moves about the mean and
the burstiness is kept. ``conditioned`` reads it as the same traffic in its own
periods at that rate: a held-out window that ran busier than the fitted mean spent
more of its time in the busy states (and carried their requests), not the same
states louder. On Azure's 2023 conversation trace the minutes at 7.4 req/s were as
smooth as Poisson at 3 s (the fitted mean, 5.5 req/s, alternates between states of
4.8 and 7.0 req/s), and their answers were 40% shorter.

The conditioned process is the exponential tilt of the chain (the process seen
given an atypical long-run mean, in large-deviation terms): with counts per bin
Poisson of mean ``l_j = rate_j * bin``, the matrix ``M(i, j) = P(i, j) *
exp(l_j * (e^theta - 1))`` has a Perron root ``rho`` and right eigenvector ``h``;
the tilted chain moves ``P(i, j) * exp(l_j * (e^theta - 1)) * h_j / (rho * h_i)`` and
each state's rate becomes ``rate_j * e^theta``. Its mean rate grows with ``theta``,
which is found by bisection. Far beyond every state's rate it is the busiest
state's Poisson process at the rate asked; at the fitted mean it is the model
itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.errors import UsageError
from tailreplay.traces.workload.hmm import Mmpp, stationary

__all__ = ["conditioned"]

Array = npt.NDArray[Any]
_BISECTIONS = 200
_RELATIVE = 1e-9
"""The tilted mean rate is within this share of the rate asked..."""
_MISSED = 1e-6
"""...and is refused beyond this share once the bisection has run its course."""
_REACH = 30.0
"""``theta`` is searched this far (in log rate) beyond the states' own rates."""


def conditioned(mmpp: Mmpp, rate: float) -> Mmpp:
    """``mmpp`` conditioned on a long-run mean of ``rate`` requests a second (above 0).

    A chain some of whose states cannot reach others (a transition of 0) may have no
    tilt that runs at ``rate``: the tilted chain then settles in one part of it. So
    may one whose states' rates are so far apart (0 and 10^6 a bin) that the tilt
    between them is finer than a double. That is refused (``UsageError``) rather
    than drawn at another rate, or at none."""
    rates = np.array(mmpp.rates)
    busy = rates[rates > 0]
    # In logs: a rate asked far from the states' (1e-300 against 1e9) overflows a ratio.
    lo = math.log(rate) - math.log(float(busy.max())) - _REACH
    hi = math.log(rate) - math.log(float(busy.min())) + _REACH
    tilted, mean = mmpp, mmpp.mean_rate
    for _ in range(_BISECTIONS):
        theta = (lo + hi) / 2
        tilted = _tilted(mmpp, theta)
        mean = tilted.mean_rate
        if abs(mean - rate) <= _RELATIVE * rate:
            return tilted
        lo, hi = (theta, hi) if mean < rate else (lo, theta)
    if abs(mean - rate) <= _MISSED * rate:
        return tilted
    raise UsageError(
        f"the model cannot run at {rate:g} req/s as its own periods (the nearest its "
        f"chain runs at is {mean:.3g} req/s): use --scaling users"
    )


def _tilted(mmpp: Mmpp, theta: float) -> Mmpp:
    p = np.array(mmpp.transitions)
    load = np.array(mmpp.rates) * mmpp.bin_s * math.expm1(theta)
    # Only the differences between states matter: a common factor scales rho, not h.
    m = p * np.exp(load - load.max())[None, :]
    values, vectors = np.linalg.eig(m)
    h = np.abs(vectors[:, int(np.argmax(values.real))].real)
    # Row i sums to rho * h_i: normalising each row divides by it without rho.
    moves = m * h[None, :]
    rows = moves.sum(1)
    # A state from which no kept state is reached keeps its own moves: the tilted
    # chain never enters it, and its row must still be a distribution.
    stuck = ~(rows > 0) | ~(h > 1e-300)
    out = np.where(stuck[:, None], p, moves / np.where(stuck, 1.0, rows)[:, None])
    share = stationary(out)
    return Mmpp(
        mmpp.bin_s,
        (np.array(mmpp.rates) * math.exp(theta)).tolist(),
        out.tolist(),
        share.tolist(),
        mmpp.loglik,
        mmpp.bic,
    )
