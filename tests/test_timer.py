"""``replayer/timer.py``: a wake-up at an absolute monotonic instant, never early, that
costs no CPU while it waits (a timerfd on the loop, not a busy yield)."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from tailreplay.replayer.timer import PreciseTimer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux")


async def test_it_wakes_at_the_instant_never_before() -> None:
    timer = PreciseTimer.open(asyncio.get_running_loop())
    assert timer is not None
    try:
        late = []
        for _ in range(50):
            due = time.monotonic() + 0.0007  # under a millisecond: the loop's timers cannot
            await timer.wait_until(due)
            late.append(time.monotonic() - due)
        assert min(late) >= 0, "woke before the instant"
        # Typically tens of microseconds; bounded loosely for a busy machine.
        assert sorted(late)[len(late) // 2] < 0.005, late
        await timer.wait_until(time.monotonic() - 1)  # past: returns at once
    finally:
        timer.close()


async def test_waiting_costs_no_cpu_and_other_tasks_run_meanwhile() -> None:
    timer = PreciseTimer.open(asyncio.get_running_loop())
    assert timer is not None
    ticks = 0

    async def other() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    side = asyncio.create_task(other())
    try:
        cpu0, wall0 = time.process_time(), time.monotonic()
        await timer.wait_until(wall0 + 0.3)
        cpu = time.process_time() - cpu0
        assert time.monotonic() - wall0 >= 0.3
        assert ticks >= 5  # the loop ran the other task while the timer waited
        # A busy yield would burn up to the whole 0.3 s; waiting in the kernel, next to none.
        assert cpu < 0.06, f"{cpu * 1e3:.1f} ms of CPU over a 300 ms wait"
    finally:
        side.cancel()
        timer.close()


async def test_a_cancelled_wait_leaves_the_next_one_exact() -> None:
    timer = PreciseTimer.open(asyncio.get_running_loop())
    assert timer is not None
    try:
        waiting = asyncio.create_task(timer.wait_until(time.monotonic() + 0.002))
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.sleep(0.005)  # the cancelled wait's expiry fires with no one waiting
        due = time.monotonic() + 0.05
        await timer.wait_until(due)
        assert time.monotonic() >= due  # not woken by the stale expiry
    finally:
        timer.close()
