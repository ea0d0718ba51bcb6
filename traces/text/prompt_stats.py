"""What a prompt's tokens look like, without keeping them: its token-level Shannon
entropy (bits per token, of the prompt's own token frequencies) and its repetition
(the share of its tokens that repeat one seen earlier in it). Captured for every
request whose prompt the proxy can read, in every body mode; the replayer draws
synthetic prompts to the same entropy (``replayer/prompts.py``)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

__all__ = ["entropy_bits", "prompt_stats"]


def entropy_bits(counts: np.ndarray) -> float:
    """Shannon entropy (bits) of the frequencies ``counts`` (zeros ignored).

    >>> entropy_bits(np.array([1, 1, 1, 1]))
    2.0
    """
    counts = counts[counts > 0]
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def prompt_stats(tokens: Sequence[int]) -> tuple[int, int] | None:
    """(entropy in millibits per token, repetition per mille) of a prompt's tokens.

    >>> prompt_stats([1, 2, 1, 2])
    (1000, 500)
    """
    if not tokens:
        return None
    n = len(tokens)
    # H = log2(n) - sum(c log2 c) / n: the same entropy as entropy_bits, in one pass.
    if n < 256:
        # Counted by Counter and summed in Python: for the short prompts of most
        # requests numpy's calls cost more than the work (~3 µs against ~1 µs for 20
        # tokens; np.unique ~12 µs). A count of 1 adds nothing to the sum.
        values = Counter(tokens).values()
        weighted = math.fsum([c * math.log2(c) for c in values if c > 1])
        distinct = len(values)
    else:  # sorted in numpy: 12 µs for 1,000 tokens of prose, against 24 by Counter
        counts = np.unique(np.fromiter(tokens, np.int64, n), return_counts=True)[1]
        weighted = float(np.dot(counts, np.log2(counts)))
        distinct = len(counts)
    entropy = math.log2(n) - weighted / n
    repetition = 1.0 - distinct / n
    return round(max(entropy, 0.0) * 1000), round(repetition * 1000)
