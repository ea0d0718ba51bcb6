"""Burstiness as the index of dispersion of counts: Var(N_w) / E(N_w).

N_w is the number of arrivals in a window of w seconds, counted over consecutive
windows from the first arrival. A Poisson process has 1 at every w; a burstier
process more, a more regular one less. It is what a P99 depends on and what a gap
distribution alone cannot show: correlated gaps (rush minutes) raise it at long
windows while every single gap looks exponential.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["WINDOWS_S", "index_of_dispersion"]

WINDOWS_S = (3.0, 30.0, 60.0)
"""The windows every model and check reports."""
_MIN_WINDOWS = 10
"""Fewer whole windows than this in the span: no estimate."""
_MAX_WINDOWS = 5_000_000
"""At most this many windows from the first arrival are counted (40 MB), so a sparse
trace of a year at 1 s windows stays bounded."""


def index_of_dispersion(times_s: npt.NDArray[Any], window_s: float) -> float | None:
    """IDC of arrival times (seconds, sorted) at ``window_s``; None if the span holds
    fewer than 10 whole windows."""
    if times_s.size < 2:
        return None
    span = float(times_s[-1] - times_s[0])
    windows = min(int(span // window_s), _MAX_WINDOWS)
    if windows < _MIN_WINDOWS:
        return None
    offsets = times_s[times_s < times_s[0] + windows * window_s] - times_s[0]
    which = (offsets // window_s).astype(np.int64)
    counts = np.bincount(which[which < windows], minlength=windows)
    mean = float(counts.mean())
    return float(counts.var()) / mean if mean > 0 else None
