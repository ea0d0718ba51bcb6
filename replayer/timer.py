"""Waking at an absolute instant to the microsecond without spinning: a Linux timerfd.

The event loop's own timers count whole milliseconds (epoll's timeout; libuv's), so
a send timed by them alone lands up to a millisecond off. Yielding to the loop until
the instant comes (``asyncio.sleep(0)`` in a loop) is precise but busy: the process
keeps a core at 100% whenever a send is less than the yield window away, which
above a few hundred requests a second is always, and on a shared machine that core
is taken from the target, the other workers and the responder.

A timerfd armed at the instant on CLOCK_MONOTONIC (the clock ``time.monotonic()``
reads) makes the loop's poll return within microseconds of it, and costs nothing
while it waits; the loop reads responses meanwhile as it would anyway. Where there
is no timerfd (not Linux), ``PreciseTimer.open`` returns None and the caller yields
as before.

How long before due to stop waiting and yield instead (``WakeWindow``) adapts to how
late the wake-ups come. On a virtual machine a process that sleeps lets its vCPU
halt, and the host may give that core to another guest: most wake-ups are
~0.1 ms late, but while the host is busy some are milliseconds late, and they come
in bursts. A yield keeps the vCPU running, so after a late wake-up the window widens
to cover it, and narrows back as wake-ups come on time.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys

__all__ = ["PreciseTimer", "WakeWindow"]

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class WakeWindow:
    """How long before each send the dispatcher stops sleeping and yields busily.

    ``narrowest`` while wake-ups come on time. A wake-up more than ``narrowest``
    late (one whose send would have left late at the narrowest window) widens the
    window to twice its lateness, up to ``widest``, or keeps it that wide; the
    widening halves every ``half_life_s`` after the last late wake-up. A late
    wake-up costs at most its own send, and a host that keeps waking the replay
    late costs the CPU of a busy yield for as long as it does: on a quiet machine
    the window stays narrow and the wait nearly free; on a busy shared one it is
    wide, and costs what a yield before every send does. A wake-up's lateness
    includes the loop's other callbacks run before it, so a replay short of CPU
    widens the window too; by then its sends are closer together than the window.
    Measured against a fixed window and a yield in docs/benchmarks.md, "The last
    wait before each send".
    """

    def __init__(self, narrowest: float, widest: float, *, half_life_s: float = 1.0) -> None:
        self.narrowest, self.widest, self.half_life_s = narrowest, widest, half_life_s
        self._extra = 0.0  # the widening, as of self._at
        self._at = 0.0

    def at(self, now: float) -> float:
        """The window for a send due at ``now``. Due times ascend; one that steps back
        (a record past the reorder window) leaves the window as it is."""
        if now > self._at:
            if self._extra:
                self._extra *= 0.5 ** ((now - self._at) / self.half_life_s)
                if self._extra < 1e-6:
                    self._extra = 0.0
            self._at = now
        return self.narrowest + self._extra

    def woke(self, late_s: float) -> None:
        """A wake-up came ``late_s`` after its instant (for the send due at the last
        ``at``)."""
        if late_s > self.narrowest:
            self._extra = max(self._extra, min(2 * late_s, self.widest) - self.narrowest)


class PreciseTimer:
    """One timerfd on the running loop; one waiter at a time (the dispatcher)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, libc: ctypes.CDLL, fd: int) -> None:
        self._loop, self._libc, self._fd = loop, libc, fd
        self._waiter: asyncio.Future[None] | None = None
        loop.add_reader(fd, self._fired)

    @classmethod
    def open(cls, loop: asyncio.AbstractEventLoop) -> PreciseTimer | None:
        """A timer on ``loop``, or None where timerfd is not available."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        return cls(loop, libc, fd)

    async def wait_until(self, when: float) -> None:
        """Return once ``time.monotonic()`` has reached ``when`` (at once if it has)."""
        sec = int(when)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(sec, int((when - sec) * 1e9)))
        if sec <= 0 and spec.it_value.tv_nsec == 0:
            return  # an all-zero time would disarm the timer, not fire it
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None):
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiry count; reading it re-arms the readiness
        except BlockingIOError:
            return
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def close(self) -> None:
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
