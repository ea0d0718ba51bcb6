"""Whether capture works: the recorder making progress, and no record dropped lately.

A dead recorder is seen at once (its process sentinel); a hung one (stopped with
SIGSTOP, stuck on a disk) is alive and silent, so the proxy watches its progress:
the counters the recorder publishes (``proxy/recorder_process.py``), or its CPU
time (a large record takes seconds to build), must move while exchanges wait for
it. No move for ``HUNG_S`` with work waiting marks capture down; ``RESTART_HUNG_S``
later the recorder is killed and restarted, and what it held is counted as
dropped. Records dropped within the last ``DROP_WINDOW_S`` (a
full disk, a recorder behind) also mark capture degraded: the proxy serves, but
the archive is not the traffic.
"""

from __future__ import annotations

__all__ = ["DROP_WINDOW_S", "HUNG_S", "RESTART_HUNG_S", "CaptureHealth"]

HUNG_S = 3.0
"""No progress this long, with exchanges waiting: the recorder is hung. Progress is
published at least every ``flush_interval`` (1 s by default) while work waits."""
RESTART_HUNG_S = 30.0
"""Hung this long: killed and started again (what it held is counted as dropped)."""
DROP_WINDOW_S = 10.0
"""Capture is degraded while a record was dropped within this window."""


class CaptureHealth:
    """Fed the recorder's counters now and then; says what is wrong with capture."""

    def __init__(self, now: float) -> None:
        self._mark = -1
        self._progress_at = now
        self._dropped = 0
        self._dropped_at: float | None = None
        self.waiting = 0
        """Exchanges handed to the recorder and not yet accounted for."""

    def observe(self, now: float, *, waiting: int, progress: int, dropped: int) -> None:
        """``waiting``: exchanges sent and not accounted for; ``progress``: a count the
        recorder raises as it works; ``dropped``: records dropped so far."""
        if progress != self._mark or waiting <= 0:
            self._mark = progress
            self._progress_at = now
        self.waiting = waiting
        if dropped != self._dropped:
            self._dropped = dropped
            self._dropped_at = now

    def restarted(self, now: float) -> None:
        """A new recorder: its counters start again."""
        self._mark = -1
        self._progress_at = now

    def stalled_s(self, now: float) -> float:
        """How long the recorder has made no progress with work waiting (0 if it has)."""
        return now - self._progress_at if self.waiting > 0 else 0.0

    def problem(self, now: float) -> str | None:
        """Why capture is degraded now, or None."""
        stalled = self.stalled_s(now)
        if stalled >= HUNG_S:
            return (
                f"the recorder has made no progress for {stalled:.0f} s "
                f"({self.waiting:,} exchanges waiting)"
            )
        if self._dropped_at is not None and now - self._dropped_at < DROP_WINDOW_S:
            return (
                f"records dropped in the last {DROP_WINDOW_S:.0f} s ({self._dropped:,} so far): "
                "the disk is failing or the recorder is behind"
            )
        return None
