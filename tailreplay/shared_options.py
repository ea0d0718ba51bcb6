"""Options that several commands share, each declared once: flag, default, valid range
and help.

``replay``, ``capacity`` and ``deploy job`` (through the replay it runs in each pod)
take ``--speed``, ``--tail-stretch`` and ``--tail-quantile``; the configs take their
defaults from here, the command line's options are made from here
(``cli/options.setting_option``), and a result archive's header is checked against
the same range (``traces/archive/replay_header.py``). So a value one command takes,
every command takes, and an archive that records it reads back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

from tailreplay.errors import UsageError

__all__ = ["ADVISED_TAIL_STRETCH", "SPEED", "TAIL_QUANTILE", "TAIL_STRETCH", "Setting"]

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One option as every command that takes it declares it."""

    flag: str
    default: T
    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    """The range excludes ``low`` itself."""
    high_open: bool = False

    def admits(self, value: float) -> bool:
        """Whether ``value`` is finite and in the range."""
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (
            self.high is not None and (value > self.high or (self.high_open and value == self.high))
        )

    def refuse_outside(self, value: float) -> None:
        """Raise ``UsageError`` (exit 2) naming the flag and its range when ``value`` is
        outside it: how a config built from Python meets the command line's check."""
        if not self.admits(value):
            raise UsageError(f"{self.flag} {value!r}: must be {self.range_text()}")

    def range_text(self) -> str:
        """The range as an error or a check names it: ``1..4``, ``0<x<1``."""
        low = "" if self.low is None else f"{self.low:g}{'<' if self.low_open else '<='}"
        high = "" if self.high is None else f"{'<' if self.high_open else '<='}{self.high:g}"
        return f"{low}x{high}"


SPEED: Setting[str] = Setting(
    "--speed",
    "1x",
    "2x, 200%, 0.5x; a ramp 1x..4x; steps 1x,2x,3x@2m (each the next 2 minutes of replay "
    "time, the last to the end); pulses 1x+10x:5s/60s (5 s at 10x every 60 s).",
)
TAIL_STRETCH: Setting[float] = Setting(
    "--tail-stretch",
    1.8,
    "Output budget factor for the requests of the recorded tail (1 turns it off).",
    low=1.0,
    high=4.0,
)
ADVISED_TAIL_STRETCH = (1.5, 2.0)
"""Below, too weak to keep the tail's pressure; above, it distorts the workload: a run
outside says so, and runs."""
TAIL_QUANTILE: Setting[float] = Setting(
    "--tail-quantile",
    0.99,
    "Where the tail starts: the recorded requests above this quantile of their cost.",
    low=0.0,
    high=1.0,
    low_open=True,
    high_open=True,
)
