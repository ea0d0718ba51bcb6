"""Time dilation: recorded offsets → replay offsets (pure arithmetic, no clock).

``--speed 2x`` (or ``200%``) divides every offset by 2; ``--speed 1x..4x`` ramps the
factor linearly over *replay* time, so a recorded offset t is replayed at the τ
where ∫₀^τ f = t, with f(τ) = a + (b - a)·τ/T and T = 2·T_rec/(a + b) the replay's
length.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailreplay.errors import UsageError

__all__ = ["Speed", "parse_speed"]

_FACTOR = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(x|%)?\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Speed:
    start: float
    end: float

    @property
    def is_ramp(self) -> bool:
        return self.start != self.end

    def replay_offsets(
        self, recorded_s: npt.NDArray[np.float64], span_s: float
    ) -> npt.NDArray[np.float64]:
        """Replay offsets (s) for recorded offsets (s) from the first request.

        ``span_s`` is the recorded span of the whole replayed set (needed for a ramp).

        >>> Speed(2, 2).replay_offsets(np.array([0.0, 10.0]), 10.0)
        array([0., 5.])
        """
        a, b = self.start, self.end
        if not self.is_ramp or span_s <= 0:
            out: npt.NDArray[np.float64] = recorded_s / a
            return out
        total = 2 * span_s / (a + b)  # the replay's own length
        k = (b - a) / total  # df/dτ
        # Solve a·τ + k·τ²/2 = t for τ >= 0 (the root that grows with t).
        disc = np.maximum(a * a + 2 * k * recorded_s, 0.0)
        tau: npt.NDArray[np.float64] = (np.sqrt(disc) - a) / k
        return tau

    def replay_offset(self, recorded_s: float, span_s: float) -> float:
        """``replay_offsets`` for one value, without numpy's per-call cost."""
        a, b = self.start, self.end
        if not self.is_ramp or span_s <= 0:
            return recorded_s / a
        k = (b - a) * (a + b) / (2 * span_s)
        return (math.sqrt(max(a * a + 2 * k * recorded_s, 0.0)) - a) / k

    def __str__(self) -> str:
        return f"{self.start:g}x" if not self.is_ramp else f"{self.start:g}x..{self.end:g}x"


def _factor(text: str, whole: str) -> float:
    m = _FACTOR.match(text)
    if not m:
        raise UsageError(f"invalid --speed {whole!r}: use e.g. 2x, 200%, 0.5x or 1x..4x")
    value = float(m.group(1)) / (100.0 if (m.group(2) or "").lower() == "%" else 1.0)
    if value <= 0:
        raise UsageError(f"invalid --speed {whole!r}: the factor must be positive")
    return value


def parse_speed(text: str) -> Speed:
    """``2x``, ``200%``, ``0.5x``, ``1.5`` or a ramp ``1x..4x``."""
    if ".." in text:
        left, _, right = text.partition("..")
        return Speed(_factor(left, text), _factor(right, text))
    f = _factor(text, text)
    return Speed(f, f)
