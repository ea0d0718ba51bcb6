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
from typing import Any, NamedTuple

import numpy.typing as npt

from tailreplay.traces.results.client_health import ClientVerdict, client_verdict

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
    (/proc/thread-self/schedstat); None where the kernel does not say (a kernel that
    keeps no such account writes zeros, and a thread that runs Python has run)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            ran, queued = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return None
    return queued if ran else None


class _Readings(NamedTuple):
    wall: float
    cpu: float
    steal: tuple[int, int] | None
    queued: int | None

    @classmethod
    def now(cls) -> _Readings:
        return cls(time.monotonic(), time.process_time(), steal_ticks(), run_queue_ns())


class LoopWatch:
    """From ``start`` (the run's t0) until ``until`` is set (everything sent), ticks
    every 20 ms on the replay's loop, noting how late each tick came, and reads the
    process's CPU, the loop thread's run-queue wait and the machine's steal over that
    span: the span the dispatch lags come from, not a wait for ``--start-at`` before
    it nor the answers still streaming after it. Made and run on the loop's thread,
    whose run-queue wait it reads."""

    def __init__(self, start: float, until: asyncio.Event | None = None) -> None:
        self.stalls = 0
        self.worst_s = 0.0
        self._start, self._until = start, until
        self._first: _Readings | None = None
        self._last: _Readings | None = None

    async def run(self) -> None:
        """Until ``until`` is set, or cancelled (a closed loop, or a stop)."""
        await asyncio.sleep(max(self._start - time.monotonic(), 0.0))
        self._first = _Readings.now()
        loop = asyncio.get_running_loop()
        # One waiter for ``until`` for the whole span, and a tick a future and a timer:
        # the watch wakes the replay 50 times a second, so a tick is kept cheap (a
        # wait_for of the event made a task and raised through a cancellation each).
        sent = None if self._until is None else loop.create_task(self._until.wait())
        tick: asyncio.Future[None] | None = None

        def wake(_: object = None) -> None:
            if tick is not None and not tick.done():
                tick.set_result(None)

        if sent is not None:
            sent.add_done_callback(wake)
        try:
            while sent is None or not sent.done():
                # time.monotonic, as the dispatch's lags: uvloop's loop.time() counts
                # whole ms. The tick ends early when everything is sent, so the span does.
                due = time.monotonic() + _TICK_S
                tick = loop.create_future()
                timer = loop.call_later(_TICK_S, wake)
                try:
                    await tick
                finally:
                    timer.cancel()
                late = time.monotonic() - due
                if late >= _STALL_S:
                    self.stalls += 1
                    self.worst_s = max(self.worst_s, late)
        finally:
            self._last = _Readings.now()
            if sent is not None:
                sent.cancel()

    def _span(self) -> tuple[_Readings, _Readings] | None:
        """The readings at the span's ends (its end now, while it lasts); None before
        it began. Call it from the loop's thread."""
        if self._first is None:
            return None
        return self._first, self._last or _Readings.now()

    def share(self, seconds: float) -> float | None:
        """``seconds`` over the span's wall time; None before the span began."""
        span = self._span()
        if span is None:
            return None
        wall = span[1].wall - span[0].wall
        return seconds / wall if wall > 0 else 0.0

    def cpu_share(self) -> float | None:
        """The process's CPU time over the span's wall time (1.0: a whole core); None
        before the span began (a run stopped before its t0)."""
        span = self._span()
        return None if span is None else self.share(span[1].cpu - span[0].cpu)

    def steal_share(self) -> float | None:
        """The share of the machine's CPU time its hypervisor gave to others over the
        span; None where unknown."""
        span = self._span()
        if span is None or span[0].steal is None or span[1].steal is None:
            return None
        (steal0, all0), (steal1, all1) = span[0].steal, span[1].steal
        return (steal1 - steal0) / (all1 - all0) if all1 > all0 else 0.0

    def wait_share(self) -> float | None:
        """The loop thread's time waiting for a CPU over the span's wall time; None
        where unknown."""
        span = self._span()
        if span is None or span[0].queued is None or span[1].queued is None:
            return None
        return self.share((span[1].queued - span[0].queued) / 1e9)


def watched_verdict(
    lags_ns: npt.NDArray[Any], lag_limit_ms: float, watch: LoopWatch, yielded_s: float = 0.0
) -> ClientVerdict:
    """The verdict of a run this process watched; ``yielded_s``, the dispatcher's busy
    wait until due times, is CPU the replay spent on precision, not on its requests."""
    cpu, yielded = watch.cpu_share(), watch.share(yielded_s)
    busy = None if cpu is None or yielded is None else max(cpu - yielded, 0.0)
    return client_verdict(
        lags_ns,
        lag_limit_ms,
        loop_stalls=watch.stalls,
        worst_stall_ms=watch.worst_s * 1000,
        cpu_share=cpu,
        cpu_busy_share=busy,
        cpu_wait_share=watch.wait_share(),
        steal_share=watch.steal_share(),
    )
