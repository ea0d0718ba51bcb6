"""``replayer/timer.py``: a wake-up at an absolute monotonic instant, never early, that
costs no CPU while it waits (a timerfd on the loop, not a busy yield)."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import pytest

from tailreplay.replayer.timer import PreciseTimer, WakeWindow

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux")


async def test_it_wakes_at_the_instant_never_before() -> None:
    # How late this machine wakes a thread from as short a sleep right now: a busy one
    # wakes every sleeper late, the timer's too.
    slept = []
    for _ in range(50):
        due = time.monotonic() + 0.0007
        time.sleep(0.0007)
        slept.append(time.monotonic() - due)
    timer = PreciseTimer.open(asyncio.get_running_loop())
    assert timer is not None
    try:
        late = []
        for _ in range(50):
            due = time.monotonic() + 0.0007  # under a millisecond: the loop's timers cannot
            await timer.wait_until(due)
            late.append(time.monotonic() - due)
        assert min(late) >= 0, "woke before the instant"
        # Typically tens of microseconds, as a sleep's; bounded loosely for a busy machine.
        assert statistics.median(late) < 0.005 + 2 * statistics.median(slept), (late, slept)
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


def test_the_window_stays_narrow_while_wake_ups_come_within_it() -> None:
    w = WakeWindow(0.00025, 0.0015)
    for i in range(3000):  # 3 s at 1,000/s, wake-ups 0.05-0.25 ms late
        assert w.at(100.0 + i / 1000) == 0.00025
        w.woke(0.00005 + 0.0002 * (i % 5) / 4)


def test_a_late_wake_up_widens_the_window_and_it_narrows_after() -> None:
    w = WakeWindow(0.00025, 0.0015)
    w.at(100.0)
    w.woke(0.0006)  # its send left 0.35 ms late
    assert w.at(100.0) == pytest.approx(0.0012)  # twice the wake-up's lateness
    w.woke(0.0003)  # a smaller one keeps the window as wide
    assert w.at(100.0) == pytest.approx(0.0012)
    w.woke(0.01)  # a 10 ms stall: as wide as it goes
    assert w.at(100.0) == pytest.approx(0.0015)
    assert w.at(101.0) == pytest.approx(0.00025 + 0.00125 / 2)  # half the widening a second
    assert w.at(99.0) == pytest.approx(0.00025 + 0.00125 / 2)  # a step back changes nothing
    assert w.at(130.0) == 0.00025  # back to narrow


@pytest.mark.parametrize("rate", [100, 1000])
@pytest.mark.parametrize("late_s", [0.0006, 0.001, 0.0014])
def test_a_burst_that_lasts_costs_its_first_send_only(rate: int, late_s: float) -> None:
    # Every wake-up late by the same amount for 10 s: once the window covers it, the
    # wake-ups it absorbs keep it wide, so no send is late again.
    w = WakeWindow(0.00025, 0.0015)
    late_sends = 0
    for i in range(10 * rate):
        window = w.at(100.0 + i / rate)
        late_sends += late_s - window > 0
        w.woke(late_s)
    assert late_sends == 1
