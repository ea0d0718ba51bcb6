"""Injected faults for tests: 500s, stalls before the first token, resets mid-stream.

Draws come from one generator seeded by ``--seed``, advanced once per request in
arrival order, so a run with the same seed and the same request order fails the
same requests the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["FaultPlan", "Faults"]


@dataclass(frozen=True, slots=True)
class FaultPlan:
    error: bool = False
    stall_s: float = 0.0
    reset_after: int | None = None
    """Reset the connection after this many output tokens (None: no reset)."""


@dataclass
class Faults:
    error_rate: float = 0.0
    stall_ms: float = 0.0
    reset_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("error_rate", "reset_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, not {value}")
        self._rng = random.Random(self.seed ^ 0x5EED)

    @property
    def active(self) -> bool:
        return bool(self.error_rate or self.stall_ms or self.reset_rate)

    def draw(self, target_tokens: int) -> FaultPlan:
        if not self.active:
            return FaultPlan()
        rng = self._rng
        error = rng.random() < self.error_rate
        reset = rng.random() < self.reset_rate
        return FaultPlan(
            error=error,
            stall_s=self.stall_ms / 1000,
            reset_after=rng.randint(0, max(0, target_tokens - 1)) if reset else None,
        )
