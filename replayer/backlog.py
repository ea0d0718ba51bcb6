"""Behind schedule: how many requests the dispatcher starts before it yields to the loop.

After starting a request (making its task) the dispatcher yields, so that the task
sends at once, before anything else is built or started. When the next request is
due already (the replay is behind schedule, or requests tie), each such yield is a
turn of the loop: a poll, and the answers read since, paid for every request of a
backlog. Starting a few before one yield, the replay catches up on less CPU
(docs/benchmarks.md, "Replay dispatch capacity": CPU a request, saturated).
"""

from __future__ import annotations

__all__ = ["Burst"]


class Burst:
    """Whether the dispatcher starts the next request before it yields: only when that
    one is due already, for at most ``most`` requests in a row and ``seconds`` since
    the first of them (a request built when taken can take milliseconds)."""

    def __init__(self, most: int, seconds: float) -> None:
        self.most, self.seconds = most, seconds
        self.held = 0
        """Requests started since the last yield."""
        self._since = 0.0

    def hold(self, next_due_s: float | None, now_s: float) -> bool:
        """True: start the request due at ``next_due_s`` (None: none left) before
        yielding, the clock reading ``now_s`` (both on the schedule's offsets)."""
        due = next_due_s is not None and next_due_s <= now_s
        late = self.held and now_s - self._since > self.seconds
        if not due or self.held >= self.most or late:
            self.held = 0
            return False
        if not self.held:
            self._since = now_s
        self.held += 1
        return True
