"""The replayer watching itself while it runs: stalls of its event loop and its CPU.

With the dispatch lag of every send, they make the run's verdict on whether the
client was fast enough to measure the target (tailreplay/traces/client_health.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy.typing as npt

from tailreplay.traces.client_health import ClientVerdict, client_verdict

__all__ = ["LoopWatch", "watched_verdict"]

_TICK_S = 0.02
_STALL_S = 0.05
"""A tick this late means the loop was blocked (or the process not scheduled)."""


class LoopWatch:
    """Ticks every 20 ms on the replay's loop, noting how late each tick came."""

    def __init__(self) -> None:
        self.stalls = 0
        self.worst_s = 0.0
        self._cpu0 = time.process_time()
        self._wall0 = time.monotonic()

    async def run(self) -> None:
        """Until cancelled."""
        while True:
            # time.monotonic, as the dispatch's lags: uvloop's loop.time() counts whole ms.
            due = time.monotonic() + _TICK_S
            await asyncio.sleep(_TICK_S)
            late = time.monotonic() - due
            if late >= _STALL_S:
                self.stalls += 1
                self.worst_s = max(self.worst_s, late)

    def cpu_share(self) -> float:
        wall = time.monotonic() - self._wall0
        return (time.process_time() - self._cpu0) / wall if wall > 0 else 0.0


def watched_verdict(
    lags_ns: npt.NDArray[Any], lag_limit_ms: float, watch: LoopWatch
) -> ClientVerdict:
    """The verdict of a run this process watched."""
    return client_verdict(
        lags_ns, lag_limit_ms, loop_stalls=watch.stalls, worst_stall_ms=watch.worst_s * 1000,
        cpu_share=watch.cpu_share(),
    )  # fmt: skip
