"""An event loop on a virtual clock: the simulator's engine run as fast as the CPU
allows, its steps' sleeps taking no time.

``run_virtual(main)`` runs a coroutine on a loop whose ``time()`` only moves when
the loop would otherwise wait: where a real loop blocks in its selector until the
next timer is due, this one jumps its clock to that timer and goes on. Everything
runs in due order exactly as on a real clock, with no jitter and no waiting, so a
workload of minutes is served in the seconds its bookkeeping costs. Nothing may
wait on real I/O (sockets, subprocesses): with no timer due and nothing ready, the
loop would wait forever, and raises ``Stalled`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["Stalled", "run_virtual"]

T = TypeVar("T")


class Stalled(RuntimeError):
    """Nothing is ready and no timer is due: on a virtual clock nothing ever will be."""


class _Jump(selectors.DefaultSelector):
    """A selector whose wait is a jump of the loop's clock by the timeout."""

    def __init__(self, loop: _VirtualLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Stalled("every task waits and no timer is due")
        if timeout > 0:
            # asyncio caps a wait at a day (MAXIMUM_SELECT_TIMEOUT): the clock goes to
            # the next timer itself, so a sleep of years is one jump, not one a day.
            now = max(self._loop.now + timeout, self._loop.next_timer())
            # From 2^24 s (194 days) on, a float's step
            # exceeds the loop's clock resolution, so landing exactly on the timer would
            # leave it not yet due, with a timeout of 0 from then on (a spin forever): one
            # float step past it then.
            if now + self._loop._clock_resolution == now:
                now = math.nextafter(now, math.inf)
            self._loop.now = now
        return []


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        """Seconds since the loop was made, on the virtual clock."""
        super().__init__(_Jump(self))
        # A timer is due once the clock is within this of it: the jump lands on the
        # timer's time, give or take a float's rounding.
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self.now

    def next_timer(self) -> float:
        """When the earliest timer is due (asyncio has dropped cancelled ones from the
        head of its heap before it waits), or now when none is."""
        scheduled: list[asyncio.TimerHandle] = getattr(self, "_scheduled", [])
        return scheduled[0].when() if scheduled else self.now


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """``main``'s result, run on a fresh loop on a virtual clock that starts at 0.

    >>> async def nap() -> float:
    ...     await asyncio.sleep(3600)
    ...     return asyncio.get_running_loop().time()
    >>> run_virtual(nap())
    3600.0
    """
    loop = _VirtualLoop()
    try:
        return loop.run_until_complete(main)
    except Stalled:
        _cancel_all(loop)
        raise
    finally:
        loop.close()


def _cancel_all(loop: _VirtualLoop) -> None:
    """Every task left cancelled and run to its end, so that its ``finally`` runs now,
    on this loop, rather than when it is collected after the loop has closed (an
    "Event loop is closed" traceback and a "Task was destroyed" line for each)."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    # A cleanup that itself waits on nothing due would stall again: left as it is then.
    with contextlib.suppress(Stalled):
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
