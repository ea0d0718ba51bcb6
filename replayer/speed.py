"""Time dilation: recorded offsets → replay offsets (pure arithmetic, no clock).

``--speed 2x`` (or ``200%``) divides every offset by 2; ``--speed 1x..4x`` ramps the
factor linearly over *replay* time, so a recorded offset t is replayed at the τ
where ∫₀^τ f = t, with f(τ) = a + (b - a)·τ/T and T = 2·T_rec/(a + b) the replay's
length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailreplay.units import parse_factor

__all__ = ["Speed", "parse_speed"]

_FORMS = "2x, 200%, 0.5x or 1x..4x"


@dataclass(frozen=True, slots=True)
class Speed:
    start: float
    end: float

    @property
    def is_ramp(self) -> bool:
        return self.start != self.end

    def replay_offset(self, recorded_s: float, span_s: float) -> float:
        """The replay offset (s) of a recorded offset (s) from the first request.

        ``span_s`` is the recorded span of the whole replayed set (needed for a ramp).

        >>> Speed(2, 2).replay_offset(10.0, 10.0)
        5.0
        """
        a, b = self.start, self.end
        if not self.is_ramp or span_s <= 0:
            return recorded_s / a
        # df/dτ over the replay's own length 2·span_s/(a + b); then solve
        # a·τ + k·τ²/2 = t for τ >= 0 (the root that grows with t).
        k = (b - a) * (a + b) / (2 * span_s)
        return (math.sqrt(max(a * a + 2 * k * recorded_s, 0.0)) - a) / k

    def __str__(self) -> str:
        return f"{self.start:g}x" if not self.is_ramp else f"{self.start:g}x..{self.end:g}x"


def parse_speed(text: str) -> Speed:
    """``2x``, ``200%``, ``0.5x``, ``1.5`` or a ramp ``1x..4x``."""
    left, ramp, right = text.partition("..")
    start = parse_factor(left, "--speed", shown=text, forms=_FORMS)
    return Speed(start, parse_factor(right, "--speed", shown=text, forms=_FORMS) if ramp else start)
