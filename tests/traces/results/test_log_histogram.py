"""LogHistogram: integers counted per value land in the bins each value's own
logarithm gives, whatever their mix of small, large, zero and negative values."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tailreplay.traces.results import log_histogram
from tailreplay.traces.results.log_histogram import LogHistogram


def _by_logarithm(values: npt.NDArray[Any]) -> tuple[list[int], int]:
    """The bins the float path gives: one logarithm a value."""
    floats = np.asarray(values, dtype=np.float64)
    positive = floats[floats > 0]
    bins = np.maximum(np.floor(np.log(positive) / np.log(1.01)).astype(np.int64) + 1, 0)
    return np.bincount(bins).tolist(), int(floats.size - positive.size)


def _counts(h: LogHistogram) -> tuple[list[int], int]:
    counts = h.counts.tolist()
    while counts and counts[-1] == 0:
        counts.pop()
    return counts, h.zeros


rng = np.random.default_rng(7)
CASES = [
    rng.integers(0, 60_000, 200_000),
    rng.integers(0, 2**62, 1000),
    np.array([0, 0, 1, 2, 3, 1 << 20, (1 << 20) - 1, 1 << 50]),
    rng.integers(-5, 100, 1000),
    np.zeros(4, dtype=np.int64),
    np.array([1], dtype=np.uint64),
    rng.random(1000) * 1e6,
]


@pytest.mark.parametrize("values", CASES, ids=range(len(CASES)))
def test_integers_land_in_the_bins_of_their_logarithm(values: npt.NDArray[Any]) -> None:
    h = LogHistogram()
    h.add(values)
    expected, zeros = _by_logarithm(values)
    while expected and expected[-1] == 0:
        expected.pop()
    assert _counts(h) == (expected, zeros)


def test_a_bound_splits_the_values_without_changing_a_bin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = rng.integers(0, 5000, 10_000)
    whole = LogHistogram()
    whole.add(values)
    monkeypatch.setattr(log_histogram, "_PER_VALUE", 700)
    split = LogHistogram()
    split.add(values)
    assert _counts(split) == _counts(whole)


def test_merged_histograms_hold_every_value() -> None:
    a, b, both = LogHistogram(), LogHistogram(), LogHistogram()
    a.add(np.array([0, 5, 10_000]))
    b.add(np.array([7, 7, 0, 1 << 40]))
    b.add_bins([3, 2, -1, 4])
    a.merge(b)
    both.add(np.array([0, 5, 10_000, 7, 7, 0, 1 << 40]))
    both.add_bins([3, 2, -1, 4])
    assert _counts(a) == _counts(both)
