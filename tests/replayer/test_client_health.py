"""The client's verdict names why a replay sent late: its own CPU, other processes on its
cores (run-queue wait), or the hypervisor (steal); and the readings behind them are real."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import numpy as np
import pytest

from tailreplay.replayer.health import LoopWatch
from tailreplay.traces.results.client_health import client_verdict, verdict_line

LATE = np.full(100, 20_000_000, dtype=np.int64)  # every send 20 ms late
ON_TIME = np.full(100, 100_000, dtype=np.int64)


def test_a_client_bound_run_with_cpu_to_spare_names_the_steal_first() -> None:
    line = verdict_line(client_verdict(LATE, 5.0, cpu_share=0.3, cpu_wait_share=0.2,
                                       steal_share=0.02))  # fmt: skip
    assert line.startswith("warning: the client was the bottleneck: dispatch lag P99 20.0 ms")
    assert "waited for a CPU 20% of the time" in line
    assert "hypervisor steal 2.0% of the machine's CPU" in line
    assert line.endswith("which no replay setting wins back: replay on dedicated vCPUs or "
                         "another host, or at a quieter time.")  # fmt: skip


def test_a_client_bound_run_queued_behind_others_says_so_and_not_to_add_workers() -> None:
    line = verdict_line(client_verdict(LATE, 5.0, cpu_share=0.3, cpu_wait_share=0.2,
                                       steal_share=0.001))  # fmt: skip
    assert "steal" not in line
    assert line.endswith(
        "Other processes held this machine's CPUs when sends were due (the target, other "
        "work, or the replay's own --workers): give the replay cores of its own, or replay "
        "slower."
    )


@pytest.mark.parametrize("steal", [0.0, 0.04])
def test_a_client_bound_run_that_kept_its_core_busy_is_told_to_spread(steal: float) -> None:
    # Saturated, the replay is the cause even with steal beside it: --workers helps.
    line = verdict_line(client_verdict(LATE, 5.0, cpu_share=0.99, cpu_wait_share=0.01,
                                       steal_share=steal))  # fmt: skip
    assert "waited" not in line
    assert line.endswith("The replay kept its core busy: replay with --workers, on a less "
                         "busy machine, or slower.")  # fmt: skip


def test_a_replay_busy_only_waiting_out_due_times_is_not_told_to_spread() -> None:
    # A core at 99%, but 70% of it the yield before sends: the steal is the cause.
    line = verdict_line(client_verdict(LATE, 5.0, cpu_share=0.99, cpu_busy_share=0.29,
                                       steal_share=0.04))  # fmt: skip
    assert "CPU 99% of a core" in line
    assert line.endswith("replay on dedicated vCPUs or another host, or at a quieter time.")


async def test_a_run_stopped_before_its_start_measured_nothing() -> None:
    watch = LoopWatch(time.monotonic() + 60, asyncio.Event())
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watch.cpu_share() is None and watch.wait_share() is None
    assert watch.steal_share() is None and watch.share(1.0) is None


def test_a_client_bound_run_without_readings_gets_the_general_advice() -> None:
    line = verdict_line(client_verdict(LATE, 5.0))
    assert line.endswith("Replay on a less busy machine, with --workers, or slower.")


def test_a_measured_run_mentions_only_what_is_worth_knowing() -> None:
    quiet = client_verdict(ON_TIME, 5.0, cpu_share=0.09, cpu_wait_share=0.03, steal_share=0.0)
    assert verdict_line(quiet) == "client: dispatch lag P99 0.10 ms (limit 5 ms), CPU 9% of a core"
    stolen = client_verdict(ON_TIME, 5.0, cpu_share=0.09, steal_share=0.012)
    assert verdict_line(stolen).endswith(", hypervisor steal 1.2% of the machine's CPU")
    # A verdict from a merge or an old summary has no readings: nothing is made up.
    bare = client_verdict(ON_TIME, 5.0)
    assert verdict_line(bare) == "client: dispatch lag P99 0.10 ms (limit 5 ms)"


CONTENDED = """
import asyncio, os, subprocess, sys, time
os.sched_setaffinity(0, {0})
hog = subprocess.Popen([sys.executable, "-c",
                        "import os, time\\nos.sched_setaffinity(0, {0})\\n"
                        "end = time.monotonic() + 5\\nwhile time.monotonic() < end: pass"])
time.sleep(0.2)  # the hog is spinning
from tailreplay.replayer.health import LoopWatch

async def main():
    sent_all = asyncio.Event()
    watch = LoopWatch(time.monotonic(), sent_all)
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(0.01)  # the watch has begun
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        pass
    sent_all.set()
    await task
    print(watch.wait_share(), watch.steal_share())

asyncio.run(main())
hog.kill()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's schedstat and steal")
def test_the_watch_reads_the_time_the_loop_thread_waited_behind_another_process() -> None:
    # Two busy processes on one CPU: each is ready to run all the time and runs about
    # half of it, so the watched one waits for the CPU about half the wall time.
    out = subprocess.run([sys.executable, "-c", CONTENDED], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()  # fmt: skip
    wait, steal = float(out[0]), float(out[1])
    assert 0.25 <= wait <= 0.9
    assert 0.0 <= steal <= 1.0


async def test_the_watch_reads_the_dispatch_span_not_the_wait_before_it_nor_the_answers_after() -> (
    None
):
    # Idle until t0 (a --start-at), busy while sending, idle while answers stream in:
    # the CPU share is the busy span's, not diluted four times by the idle ones.
    loop_start, cpu_start = time.monotonic(), time.process_time()
    sent_all = asyncio.Event()
    watch = LoopWatch(loop_start + 0.4, sent_all)
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(0.45)
    end = time.monotonic() + 0.4
    while time.monotonic() < end:
        pass
    sent_all.set()
    await asyncio.sleep(0.8)
    await task  # ended by itself once everything was sent
    diluted = (time.process_time() - cpu_start) / (time.monotonic() - loop_start)
    assert watch.cpu_share() >= 2.5 * diluted, (watch.cpu_share(), diluted)
