"""Time dilation: recorded offsets → replay offsets (pure arithmetic, no clock).

A load shape is a speed factor f(τ) over *replay* time τ: a recorded offset t is
replayed at the τ where ∫₀^τ f = t. The shapes:

- ``2x`` (or ``200%``): f = 2, every offset divided by 2;
- ``1x..4x``: a linear ramp over the replay's length T = 2·T_rec/(a + b);
- ``1x,2x,3x@2m``: steps, each the next 2 minutes of replay time at its factor, the
  last one until the archive ends;
- ``1x+10x:5s/60s``: pulses, 55 s at 1x then 5 s at 10x, every 60 s.

Steps and pulses name the phase each request falls in (``step 2 2x``, ``base``,
``pulse``), which results carry so reports can group by it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tailreplay.errors import UsageError
from tailreplay.units import parse_duration, parse_factor

__all__ = ["Pulses", "Shape", "Speed", "Steps", "parse_speed"]

_FORMS = "2x, 200%, 0.5x, a ramp 1x..4x, steps 1x,2x,3x@2m or pulses 1x+10x:5s/60s"
MAX_STEPS = 100


class Shape:
    """What the schedule asks of a load shape."""

    def replay_offset(self, recorded_s: float, span_s: float) -> float:
        """The replay offset (s) of a recorded offset (s) from the first request;
        ``span_s`` is the recorded span of the whole replayed set."""
        raise NotImplementedError

    def phase(self, replay_s: float) -> str | None:
        """The phase a request due at ``replay_s`` belongs to (None: one phase)."""
        return None

    def recorded_offset(self, replay_s: float, span_s: float) -> float:
        """The recorded offset at which the replay reaches ``replay_s`` (the whole span,
        when it never does): a bisection, as every shape's replay offset grows with
        the recorded one. Records before it are due before ``replay_s``."""
        if self.replay_offset(span_s, span_s) < replay_s:
            return math.inf
        lo, hi = 0.0, span_s
        for _ in range(64):
            mid = (lo + hi) / 2
            if self.replay_offset(mid, span_s) < replay_s:
                lo = mid
            else:
                hi = mid
        return hi

    def phase_seconds(self, length_s: float) -> dict[str, float]:
        """Replay seconds each phase lasts within a replay ``length_s`` long."""
        return {}

    def mean(self, span_s: float) -> float:
        """The mean factor: recorded span over replay length."""
        length = self.replay_offset(span_s, span_s)
        if length > 0:
            return span_s / length
        return 1.0 / self.replay_offset(1.0, 1.0)  # one instant: the first second's factor


@dataclass(frozen=True, slots=True)
class Speed(Shape):
    """A constant factor (``start == end``) or a linear ramp."""

    start: float
    end: float

    @property
    def is_ramp(self) -> bool:
        return self.start != self.end

    def replay_offset(self, recorded_s: float, span_s: float) -> float:
        """>>> Speed(2, 2).replay_offset(10.0, 10.0)
        5.0
        """
        a, b = self.start, self.end
        if not self.is_ramp or span_s <= 0:
            return recorded_s / a
        # df/dτ over the replay's own length 2·span_s/(a + b); then solve
        # a·τ + k·τ²/2 = t for τ >= 0 (the root that grows with t).
        k = (b - a) * (a + b) / (2 * span_s)
        return (math.sqrt(max(a * a + 2 * k * recorded_s, 0.0)) - a) / k

    def mean(self, span_s: float) -> float:
        return (self.start + self.end) / 2

    def __str__(self) -> str:
        return f"{self.start:g}x" if not self.is_ramp else f"{self.start:g}x..{self.end:g}x"


@dataclass(frozen=True, slots=True)
class Steps(Shape):
    """Each factor for ``step_s`` of replay time, the last one until the end."""

    factors: tuple[float, ...]
    step_s: float

    def replay_offset(self, recorded_s: float, span_s: float) -> float:
        """>>> Steps((1.0, 2.0), 10.0).replay_offset(30.0, 30.0)
        20.0
        """
        done = 0.0  # recorded seconds the earlier steps replayed
        for i, f in enumerate(self.factors):
            last = i == len(self.factors) - 1
            if last or recorded_s < done + f * self.step_s:
                return i * self.step_s + (recorded_s - done) / f
            done += f * self.step_s
        raise AssertionError("unreachable: the last step takes the rest")

    def _index(self, replay_s: float) -> int:
        return min(max(int(replay_s // self.step_s), 0), len(self.factors) - 1)

    def phase(self, replay_s: float) -> str:
        i = self._index(replay_s)
        return f"step {i + 1} {self.factors[i]:g}x"

    def phase_seconds(self, length_s: float) -> dict[str, float]:
        out: dict[str, float] = {}
        for i in range(len(self.factors)):
            begin = i * self.step_s
            end = length_s if i == len(self.factors) - 1 else min((i + 1) * self.step_s, length_s)
            if end > begin:
                out[self.phase(begin)] = end - begin
        return out

    def __str__(self) -> str:
        return ",".join(f"{f:g}x" for f in self.factors) + f"@{self.step_s:g}s"


@dataclass(frozen=True, slots=True)
class Pulses(Shape):
    """``base`` for ``period_s - burst_s``, then ``peak`` for ``burst_s``, repeated."""

    base: float
    peak: float
    burst_s: float
    period_s: float

    def replay_offset(self, recorded_s: float, span_s: float) -> float:
        """>>> Pulses(1.0, 10.0, 5.0, 60.0).replay_offset(105.0, 200.0)
        60.0
        """
        quiet = self.period_s - self.burst_s
        per_period = self.base * quiet + self.peak * self.burst_s
        periods, rest = divmod(recorded_s, per_period)
        if rest < self.base * quiet:
            into = rest / self.base
        else:
            into = quiet + (rest - self.base * quiet) / self.peak
        return periods * self.period_s + into

    def phase(self, replay_s: float) -> str:
        into = replay_s % self.period_s
        return "pulse" if into >= self.period_s - self.burst_s else "base"

    def phase_seconds(self, length_s: float) -> dict[str, float]:
        periods, rest = divmod(length_s, self.period_s)
        quiet = self.period_s - self.burst_s
        pulse = periods * self.burst_s + max(rest - quiet, 0.0)
        return {"base": length_s - pulse, "pulse": pulse}

    def __str__(self) -> str:
        return f"{self.base:g}x+{self.peak:g}x:{self.burst_s:g}s/{self.period_s:g}s"


_PULSES = re.compile(r"^([^+]+)\+([^:]+):([^/]+)/(.+)$")


def parse_speed(text: str) -> Shape:
    """``2x``, ``200%``, ``0.5x``, ``1.5``, a ramp ``1x..4x``, steps ``1x,2x@2m`` or
    pulses ``1x+10x:5s/60s``."""

    def factor(part: str) -> float:
        return parse_factor(part.strip(), "--speed", shown=text, forms=_FORMS)

    def duration(part: str) -> float:
        try:
            seconds = parse_duration(part.strip())
        except UsageError:
            raise UsageError(f"invalid --speed {text!r}: {part!r} is not a duration") from None
        if seconds <= 0:
            raise UsageError(f"invalid --speed {text!r}: durations must be positive")
        return seconds

    if m := _PULSES.match(text):
        base, peak, burst, period = factor(m[1]), factor(m[2]), duration(m[3]), duration(m[4])
        if burst >= period:
            raise UsageError(f"invalid --speed {text!r}: the pulse must be shorter than its period")
        return Pulses(base, peak, burst, period)
    if "@" in text or "," in text:
        factors, at, step = text.partition("@")
        if not at:
            raise UsageError(f"invalid --speed {text!r}: steps need a length, e.g. 1x,2x@2m")
        parts = factors.split(",")
        if len(parts) > MAX_STEPS:
            raise UsageError(f"invalid --speed {text!r}: at most {MAX_STEPS} steps")
        return Steps(tuple(factor(p) for p in parts), duration(step))
    left, ramp, right = text.partition("..")
    start = factor(left)
    return Speed(start, factor(right) if ramp else start)
