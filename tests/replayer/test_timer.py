"""``replayer/timer.py``: a wake-up at an absolute monotonic instant, never early, that
costs no CPU while it waits (a timerfd on the loop, not a busy yield)."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import pytest

from tailreplay.replayer.timer import PreciseTimer, WakeMargin

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


def _margin() -> WakeMargin:
    return WakeMargin(first=0.00025, widest=0.0015, share=0.25)


def _on_time(m: WakeMargin, rate: int, sends: int, start: int = 0) -> None:
    """``sends`` wake-ups at ``rate``, each 0.06 ms late (a quiet host's median)."""
    for i in range(start, start + sends):
        m.at(100.0 + i / rate)
        m.woke(0.00006)


def test_the_margin_starts_at_first_and_settles_on_the_wake_ups_lateness() -> None:
    m = _margin()
    assert m.at(100.0) == pytest.approx(0.00025)
    _on_time(m, 500, 2000, start=1)
    # The same lateness every time: no deviation left, the margin is that lateness.
    assert m.at(104.002) == pytest.approx(0.00006, abs=1e-9)


def test_on_a_quiet_host_the_margin_covers_most_wake_ups_and_costs_little() -> None:
    # Lateness as a quiet host gives it: 0.05-0.1 ms, one in twenty 0.15 ms.
    late = [0.00005 + 0.00005 * (i % 7) / 6 for i in range(20)]
    late[-1] = 0.00015
    m, covered, spun = _margin(), 0, 0.0
    for i in range(5000):
        margin = m.at(100.0 + i / 500)
        s = late[i % 20]
        covered += s <= margin
        spun += max(margin - s, 0.0)
        m.woke(s)
    assert covered / 5000 > 0.85  # most sends leave on time...
    assert spun / 5000 < 0.00006  # ...for under 0.06 ms of busy wait each (3% at 500/s)


@pytest.mark.parametrize(
    ("rate", "late_s"), [(100, 0.0006), (100, 0.0014), (200, 0.0006), (200, 0.0012)]
)
def test_a_burst_of_late_wake_ups_costs_its_first_sends_only(rate: int, late_s: float) -> None:
    m = _margin()
    _on_time(m, rate, rate)  # 1 s on time
    late_sends = 0
    for i in range(rate, 3 * rate):  # then 2 s of wake-ups all late_s late
        late_sends += late_s > m.at(100.0 + i / rate)
        m.woke(late_s)
    assert late_sends <= 2


def test_after_a_burst_the_margin_narrows_again() -> None:
    m = _margin()
    for i in range(50):
        m.at(100.0 + i / 200)
        m.woke(0.001)
    assert m.at(100.25) > 0.0009
    _on_time(m, 200, 100, start=51)
    assert m.at(100.755) < 0.0001


def test_one_late_wake_up_widens_the_margin_for_a_few_tens_of_sends() -> None:
    m = _margin()
    _on_time(m, 200, 200)
    m.woke(0.0014)  # a wake-up 1.4 ms late, alone
    wider = []
    for i in range(200, 300):
        wider.append(m.at(100.0 + i / 200) - 0.00006)
        m.woke(0.00006)
    assert wider[0] > 0.0008  # the next send covers most of as late a wake-up
    assert sum(w > 0.00005 for w in wider) < 30
    assert sum(wider) < 0.008  # under 8 ms of busy wait in all, over 0.5 s


@pytest.mark.parametrize("rate", [100, 500, 2000, 8000])
def test_however_late_the_wake_ups_the_busy_wait_is_a_share_of_the_time_between_sends(
    rate: int,
) -> None:
    m = _margin()
    for i in range(3 * rate):  # every wake-up 5 ms late
        margin = m.at(100.0 + i / rate)
        m.woke(0.005)
    assert margin == pytest.approx(min(0.25 / rate, 0.0015))


def test_the_mean_gap_follows_the_rate_and_ignores_a_step_back() -> None:
    m = _margin()
    for i in range(200):
        m.at(100.0 + i / 1000)
    assert m.gap == pytest.approx(0.001)
    m.at(50.0)  # a record out of order, due long before
    assert m.gap == pytest.approx(0.001)
    for _ in range(200):  # ties (a tick's requests at one instant) shrink it
        m.at(101.0)
    assert m.gap is not None and m.gap < 0.0001
    m.woke(0.005)
    assert m.at(101.0) == pytest.approx(0.25 * m.gap)


def test_without_deviations_the_margin_is_the_smoothed_lateness() -> None:
    m = WakeMargin(first=0.00025, widest=0.0015, share=0.25, deviations=0)
    assert m.at(100.0) == pytest.approx(0.00025)
    for i in range(1, 200):
        m.at(100.0 + i / 500)
        m.woke(0.00006 if i % 2 else 0.0001)
    assert m.at(100.4) == pytest.approx(0.00008, abs=0.00001)  # the mean, no deviation
