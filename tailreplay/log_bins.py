"""Bins 1% wide (relative) for positive values: what keeps a long series of inter-token
gaps in constant memory with its percentiles within 1%.

Bin ``b >= 1`` holds values ``v`` with ``1.01^(b-1) <= v < 1.01^b``; bin 0 holds values
in (0, 1); a value of 0 (tokens that arrived in one read) has no bin, it is counted
apart. The stream timeline (``tailreplay/sse.py``) bins the gaps past its exact ones
this way, and the report's histogram (``traces/results/log_histogram.py``) reads them
into the same bins.
"""

from __future__ import annotations

import math

__all__ = ["GROWTH", "bin_middle", "bin_of"]

GROWTH = 1.01
_LOG = math.log(GROWTH)


def bin_of(value: float) -> int:
    """The bin of a positive ``value``; ``bin_of(1) == 1``, ``bin_of(1000) == 695``."""
    return max(math.floor(math.log(value) / _LOG) + 1, 0)


def bin_middle(b: int) -> float:
    """The geometric middle of bin ``b``: what a percentile read off it reports."""
    return 0.5 if b == 0 else GROWTH ** (b - 0.5)
