"""The replayer watching itself while it runs: stalls of its event loop, its CPU, and
the CPU it was denied.

With the dispatch lag of every send, they make the run's verdict on whether the
client was fast enough to measure the target (tailreplay/traces/client_health.py).
A send is late when the dispatching thread does not run at its due time, for one of
three reasons the verdict tells apart: the replay itself was busy (its CPU share,
loop stalls), other processes held the CPUs (the thread's wait in the run queue),
or the machine's hypervisor gave its CPUs to other guests (steal). On a shared
virtual machine steal alone can take a run's lag P99 from 0.1 ms to several
milliseconds (docs/benchmarks.md, "Replay dispatch capacity").
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy.typing as npt

from tailreplay.traces.client_health import ClientVerdict, client_verdict

__all__ = ["LoopWatch", "run_queue_ns", "steal_ticks", "watched_verdict"]

_TICK_S = 0.02
_STALL_S = 0.05
"""A tick this late means the loop was blocked (or the process not scheduled)."""
_STEAL_FIELD = 8
"""Steal's column in /proc/stat's ``cpu`` line (user nice system idle iowait irq softirq
steal, then guest time, which user and nice already count)."""


def steal_ticks() -> tuple[int, int] | None:
    """(steal, all) clock ticks the machine's CPUs have counted since boot, from
    /proc/stat; None where there is none (not Linux)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1 : _STEAL_FIELD + 1]]
    except (OSError, ValueError):
        return None
    if fields[:1] != [b"cpu"] or len(ticks) < _STEAL_FIELD:
        return None
    return ticks[-1], sum(ticks)


def run_queue_ns() -> int | None:
    """Nanoseconds the calling thread has spent ready to run but waiting for a CPU
    (/proc/thread-self/schedstat); None where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


class LoopWatch:
    """Ticks every 20 ms on the replay's loop, noting how late each tick came; made on
    the loop's thread, whose run-queue wait it reads."""

    def __init__(self) -> None:
        self.stalls = 0
        self.worst_s = 0.0
        self._cpu0 = time.process_time()
        self._wall0 = time.monotonic()
        self._steal0 = steal_ticks()
        self._queued0 = run_queue_ns()

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

    def steal_share(self) -> float | None:
        """The share of the machine's CPU time its hypervisor gave to others since the
        watch began; None where unknown."""
        now = steal_ticks()
        if now is None or self._steal0 is None:
            return None
        ticks = now[1] - self._steal0[1]
        return (now[0] - self._steal0[0]) / ticks if ticks > 0 else 0.0

    def wait_share(self) -> float | None:
        """The loop thread's time waiting for a CPU since the watch began, over wall time;
        None where unknown. Call it from the loop's thread."""
        now, wall = run_queue_ns(), time.monotonic() - self._wall0
        if now is None or self._queued0 is None or wall <= 0:
            return None
        return (now - self._queued0) / 1e9 / wall


def watched_verdict(
    lags_ns: npt.NDArray[Any], lag_limit_ms: float, watch: LoopWatch
) -> ClientVerdict:
    """The verdict of a run this process watched."""
    return client_verdict(
        lags_ns, lag_limit_ms, loop_stalls=watch.stalls, worst_stall_ms=watch.worst_s * 1000,
        cpu_share=watch.cpu_share(), cpu_wait_share=watch.wait_share(),
        steal_share=watch.steal_share(),
    )  # fmt: skip
