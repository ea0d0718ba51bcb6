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

How long before due the timer wakes the dispatcher (``WakeMargin``) is measured:
a wake-up comes some tens of microseconds after its instant (the loop's poll
returning, the task resuming), so the timer is armed that much before due and the
dispatcher yields to the loop (a busy wait) for what is left. On a virtual machine a
process that sleeps lets its vCPU halt, and the host may give that core to another
guest: while the host is busy, wake-ups come milliseconds late, in bursts. The
margin follows the lateness of the last wake-ups, so a burst widens it (the yield
keeps the vCPU running) and it narrows as wake-ups come on time again; it is
bounded by a share of the time between sends, so however late the host wakes the
replay, the busy wait costs at most that share of a core.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys

__all__ = ["PreciseTimer", "WakeMargin"]

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class WakeMargin:
    """How long before each send the timer wakes the dispatcher, which then yields busily
    until due.

    The margin is the wake-ups' typical lateness plus twice its typical deviation, both
    smoothed as TCP smooths a round trip time (RFC 6298: a mean moving an eighth of the
    way to each sample, a mean deviation a quarter of the way): on a quiet host about
    the 90th percentile of the lateness, so most sends leave within the yield's
    microseconds of due and the rest a fraction of the lateness late. A burst of late
    wake-ups widens it within a wake-up or two, and it narrows over the next tens once
    they come on time again. It is at most ``widest``, and at most ``share`` of the
    mean time between sends (smoothed over the last ``_GAPS``): the busy wait's CPU,
    averaged over sends, stays under ``share`` of a core however late the wake-ups.
    Measured against the yield in docs/benchmarks.md, "The last wait before each send".
    The dispatcher arms it by the lateness alone (``deviations=0``: "The margin at
    the mean" there).
    """

    _GAPS = 32

    def __init__(
        self, *, first: float, widest: float, share: float, deviations: float = 2.0
    ) -> None:
        self.widest, self.share, self.deviations = widest, share, deviations
        self.late = first / 2 if deviations else first
        """The smoothed lateness of the wake-ups (seconds)."""
        self.deviation = first / (2 * deviations) if deviations else 0.0
        """Its smoothed mean deviation: ``late + deviations * deviation`` starts at ``first``."""
        self.gap: float | None = None
        """The smoothed time between due times; None until two have been seen."""
        self._due: float | None = None

    def at(self, due: float) -> float:
        """The margin for a send due at ``due``. Due times ascend; one that steps back (a
        record past the reorder window) leaves the mean gap as it is."""
        if self._due is not None and due >= self._due:
            gap = due - self._due
            self.gap = gap if self.gap is None else self.gap + (gap - self.gap) / self._GAPS
        if self._due is None or due > self._due:
            self._due = due
        margin = min(self.late + self.deviations * self.deviation, self.widest)
        return margin if self.gap is None else min(margin, self.share * self.gap)

    def woke(self, late_s: float) -> None:
        """A wake-up came ``late_s`` after the instant it was armed for."""
        late_s = max(late_s, 0.0)
        self.deviation += (abs(late_s - self.late) - self.deviation) / 4
        self.late += (late_s - self.late) / 8


class PreciseTimer:
    """One timerfd on the running loop; one waiter at a time (the dispatcher)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, libc: ctypes.CDLL, fd: int) -> None:
        self._loop, self._fd = loop, fd
        self._waiter: asyncio.Future[None] | None = None
        # One time structure, armed in place (a wake-up a request: made anew each time,
        # the structures and the argument conversions cost more than the system call).
        self._spec = _Itimerspec()
        self._value = self._spec.it_value
        self._spec_ref = ctypes.byref(self._spec)
        self._settime = libc.timerfd_settime
        self._settime.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
        self._settime.restype = ctypes.c_int
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
        nsec = int((when - sec) * 1e9)
        if sec <= 0 and nsec == 0:
            return  # an all-zero time would disarm the timer, not fire it
        value = self._value
        value.tv_sec, value.tv_nsec = sec, nsec
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None):
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
