"""The MMPP's two inner loops, checked against what they must equal: the blocked
forward-backward against the recursion a bin at a time (on emissions as extreme as
a Poisson count far from a state's rate gives, and on chains with transitions of 0),
and the drawn chain against its transition matrix."""

from __future__ import annotations

import numpy as np
import pytest

from tailreplay.traces.workload import hmm
from tailreplay.traces.workload.hmm import Mmpp


def _stepwise(logb: np.ndarray, a: np.ndarray, pi: np.ndarray) -> tuple:
    shift = logb.max(1, keepdims=True)
    return hmm._forward_backward_stepwise(np.exp(logb - shift), a, pi, float(shift.sum()))


@pytest.mark.parametrize("states", [1, 2, 3, 6])
@pytest.mark.parametrize("bins", [1, 2, 3, 17, 1_000, 4_097])
def test_the_blocked_forward_backward_is_the_recursion(states: int, bins: int) -> None:
    rng = np.random.default_rng(states * 10_000 + bins)
    logb = rng.normal(0.0, 30.0, (bins, states))  # emissions e^±90 apart in a bin
    a = rng.dirichlet(np.full(states, 0.3), size=states)
    pi = rng.dirichlet(np.ones(states))
    gamma, xi, ll = hmm._forward_backward(logb, a, pi)
    want_gamma, want_xi, want_ll = _stepwise(logb, a, pi)
    assert np.abs(gamma - want_gamma).max() < 1e-9
    assert np.abs(xi - want_xi).max() < 1e-9 * max(want_xi.max(), 1.0)
    assert ll == pytest.approx(want_ll, rel=1e-12)


def _leaky(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two states, some transitions 1e-300 (as EM drives unused ones), emissions
    e^±90 apart: in a block's product such a leak falls below a double's range
    while a path still runs through it, and later bins can make that path the
    likeliest."""
    rng = np.random.default_rng(seed)
    if seed == 4:
        a = np.array([[0.5, 0.5], [1e-300, 1.0]])
        return rng.normal(0.0, 30.0, (200, 2)), a, np.array([0.5, 0.5])
    a = rng.dirichlet(np.ones(2), 2)
    a[rng.random((2, 2)) < 0.4] = 1e-300
    return rng.normal(0.0, 30.0, (400, 2)), a / a.sum(1, keepdims=True), np.full(2, 0.5)


@pytest.mark.parametrize("seed", [4, 145])
def test_a_leak_near_underflow_is_answered_as_the_recursion_does(seed: int) -> None:
    """The blocked pass refuses a product whose reachable entries near underflow (it
    read a likelihood of 276.409 against 276.456 and posteriors 0.1 off on the
    first, and NaN transitions on the second, before it did)."""
    logb, a, pi = _leaky(seed)
    gamma, xi, ll = hmm._forward_backward(logb, a, pi)
    want_gamma, want_xi, want_ll = _stepwise(logb, a, pi)
    assert np.isfinite(xi).all()
    assert np.abs(gamma - want_gamma).max() < 1e-9 and np.abs(xi - want_xi).max() < 1e-9
    assert ll == pytest.approx(want_ll, rel=1e-12)


@pytest.mark.parametrize("seed", [126, 296, 318])
def test_a_forced_transition_into_an_unlikely_state_counts_once(seed: int) -> None:
    """A periodic chain (each state's only next state is the next one) where a bin's
    every path is ~1e-300 likely: each bin still moves once, so the expected
    transitions number the bins less one, all on the cycle."""
    rng = np.random.default_rng(seed)
    k, bins = int(rng.integers(2, 7)), int(rng.choice([5, 9, 17, 50]))
    a = np.roll(np.eye(k), 1, axis=1)
    pi = np.zeros(k)
    pi[-1] = 1.0
    _, xi, _ = hmm._forward_backward(rng.normal(0.0, 300.0, (bins, k)), a, pi)
    assert np.isfinite(xi).all()
    assert xi.sum() == pytest.approx(bins - 1) and (xi[a == 0] == 0).all()


@pytest.mark.parametrize(
    "transitions",
    [
        [[0.99, 0.01], [0.04, 0.96]],  # slow: sojourns of 100 and 25 bins
        [[0.2, 0.5, 0.3], [0.3, 0.1, 0.6], [0.0, 1.0, 0.0]],  # fast, one state never stays
    ],
)
def test_the_drawn_chain_has_its_transition_matrix(transitions: list[list[float]]) -> None:
    k = len(transitions)
    mmpp = Mmpp(1.0, [float(s + 1) for s in range(k)], transitions, [1.0] + [0.0] * (k - 1), 0, 0)
    path, _ = mmpp._path(np.random.default_rng(3), 1_000_000, 0)
    assert path.size == 1_000_000
    seen = np.zeros((k, k))
    np.add.at(seen, (path[:-1], path[1:]), 1)
    seen /= seen.sum(1, keepdims=True)
    assert np.abs(seen - np.array(transitions)).max() < 0.01
    shares = np.bincount(path, minlength=k) / path.size
    assert np.abs(shares - mmpp.stationary()).max() < 0.02


def test_a_chain_cut_every_few_bins_goes_on_as_one_chain() -> None:
    """Drawn 7 bins a call, each call from the state the last one left: the joined
    path has the chain's transitions, across the cuts too."""
    transitions = [[0.9, 0.1], [0.3, 0.7]]
    mmpp = Mmpp(1.0, [1.0, 9.0], transitions, [1.0, 0.0], 0, 0)
    rng = np.random.default_rng(11)
    parts, state = [], 0
    for _ in range(30_000):
        path, state = mmpp._path(rng, 7, state)
        parts.append(path)
    joined = np.concatenate(parts)
    seen = np.zeros((2, 2))
    np.add.at(seen, (joined[:-1], joined[1:]), 1)
    seen /= seen.sum(1, keepdims=True)
    assert np.abs(seen - np.array(transitions)).max() < 0.01
