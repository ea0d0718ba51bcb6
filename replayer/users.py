"""How many users a closed-loop replay runs (``replay --users``): a count, or steps of
counts, each for a while, like k6's ramping-vus: ``20``, or ``10,20,50@1m`` (10 users
for the first minute, 20 for the next, 50 from then on)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailreplay.units import parse_duration

__all__ = ["MAX_USERS", "Users", "parse_users"]

MAX_USERS = 10_000


@dataclass(frozen=True, slots=True)
class Users:
    counts: tuple[int, ...]
    step_s: float | None = None
    """Each count lasts this long, the last until the end; None: one count."""

    def index(self, t_s: float) -> int:
        if self.step_s is None:
            return 0
        return min(max(int(t_s // self.step_s), 0), len(self.counts) - 1)

    def count(self, t_s: float) -> int:
        return self.counts[self.index(t_s)]

    def phase(self, t_s: float) -> str | None:
        """The step a request sent at ``t_s`` belongs to (None: one count)."""
        return None if self.step_s is None else f"{self.count(t_s)} users"

    def phase_seconds(self, length_s: float | None) -> dict[str, float]:
        """Seconds each step lasts in a run ``length_s`` long (None: unknown, so the last
        step, which lasts until the end, is left out)."""
        if self.step_s is None:
            return {}
        limit = math.inf if length_s is None else length_s
        out: dict[str, float] = {}
        for i, n in enumerate(self.counts):
            begin = i * self.step_s
            end = limit if i == len(self.counts) - 1 else min((i + 1) * self.step_s, limit)
            if math.isfinite(end) and end > begin:
                out[f"{n} users"] = out.get(f"{n} users", 0.0) + end - begin
        return out

    def __str__(self) -> str:
        counts = ",".join(str(n) for n in self.counts)
        return counts if self.step_s is None else f"{counts}@{self.step_s:g}s"


def parse_users(text: str) -> Users:
    """``20`` or ``10,20,50@1m``.

    >>> parse_users("10,20@30s")
    Users(counts=(10, 20), step_s=30.0)
    """
    counts_text, at, step = text.strip().partition("@")
    try:
        counts = tuple(int(c) for c in counts_text.split(","))
    except ValueError:
        raise ValueError(f"{text!r}: give a count (20) or steps (10,20,50@1m)") from None
    if not all(1 <= n <= MAX_USERS for n in counts):
        raise ValueError(f"{text!r}: each count must be 1..{MAX_USERS}")
    if not at:
        if len(counts) > 1:
            raise ValueError(f"{text!r}: steps need a duration each (10,20,50@1m)")
        return Users(counts)
    step_s = parse_duration(step)
    if step_s <= 0:
        raise ValueError(f"{text!r}: the step must last more than 0 s")
    return Users(counts, step_s)
