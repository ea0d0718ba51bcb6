"""The client's verdict names why a replay sent late: its own CPU, other processes on its
cores (run-queue wait), or the hypervisor (steal); and the readings behind them are real."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tailreplay.traces.client_health import client_verdict, verdict_line

LATE = np.full(100, 20_000_000, dtype=np.int64)  # every send 20 ms late
ON_TIME = np.full(100, 100_000, dtype=np.int64)


def test_a_client_bound_run_names_the_steal_first() -> None:
    line = verdict_line(client_verdict(LATE, 5.0, cpu_share=0.3, cpu_wait_share=0.2,
                                       steal_share=0.02))  # fmt: skip
    assert line.startswith("warning: the client was the bottleneck: dispatch lag P99 20.0 ms")
    assert "waited for a CPU 20% of the time" in line
    assert "hypervisor steal 2.0% of the machine's CPU" in line
    assert line.endswith("which no replay setting wins back: replay on dedicated cores, or again.")


def test_a_client_bound_run_queued_behind_others_says_so_and_not_to_add_workers() -> None:
    line = verdict_line(client_verdict(LATE, 5.0, cpu_share=0.3, cpu_wait_share=0.2,
                                       steal_share=0.001))  # fmt: skip
    assert "steal" not in line
    assert line.endswith(
        "Other processes here held the CPUs when sends were due: replay "
        "where the target and other work do not share its cores, or slower."
    )


def test_a_client_bound_run_with_its_cpu_to_itself_is_told_to_spread_or_slow_down() -> None:
    line = verdict_line(client_verdict(LATE, 5.0, cpu_share=0.99, cpu_wait_share=0.01,
                                       steal_share=0.0))  # fmt: skip
    assert "waited" not in line and "steal" not in line
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
import os, subprocess, sys, time
os.sched_setaffinity(0, {0})
hog = subprocess.Popen([sys.executable, "-c",
                        "import os, time\\nos.sched_setaffinity(0, {0})\\n"
                        "end = time.monotonic() + 5\\nwhile time.monotonic() < end: pass"])
time.sleep(0.2)  # the hog is spinning
from tailreplay.replayer.health import LoopWatch
watch = LoopWatch()
end = time.monotonic() + 0.6
while time.monotonic() < end:
    pass
print(watch.wait_share(), watch.steal_share())
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
