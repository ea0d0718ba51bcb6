"""When a replay starts: its t0 on both clocks (now, or the shards' ``--start-at``), and
the heap frozen before it so a collection cannot stall the dispatch."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from tailreplay.errors import UsageError

__all__ = ["LATE_START_S", "LEAD_S", "freeze_heap", "start_times"]

LEAD_S = 0.2
"""Time to get going before the first request is due."""
LATE_START_S = 10.0
"""How far past ``--start-at`` a run may start and still keep the shared schedule."""


def start_times(
    now: float, start_at_ns: int | None, shard: tuple[int, int], say: Callable[[str], None]
) -> tuple[float, int]:
    """The replay's t0 on the monotonic clock (``now`` is its reading) and on the wall
    clock: LEAD_S from now, or ``--start-at``, which shards share to the nanosecond:
    their due times are one schedule, so a shard that starts late keeps it and its late
    requests show as lag."""
    now_wall = time.time_ns()
    if start_at_ns is None:
        return now + LEAD_S, now_wall + round(LEAD_S * 1e9)
    wait_s = (start_at_ns - now_wall) / 1e9
    if wait_s < -LATE_START_S:
        raise UsageError(
            f"--start-at was {-wait_s:.0f} s ago: the shared schedule is lost; "
            "give a time in the future"
        )
    if wait_s < 0:
        which = f"shard {shard[0]}/{shard[1]}" if shard[1] > 1 else "the replay"
        say(
            f"warning: {which} started {-wait_s * 1000:.0f} ms after --start-at; "
            "its first requests are that late (counted as lag)"
        )
    return now + wait_s, start_at_ns


def freeze_heap() -> None:
    """Keep what the process holds before the run out of the collector's walks during it.

    A full collection walks every tracked object in the process. Where the replay runs
    beside a large heap (a test session, a program that embeds it) one landed mid-run
    and stopped dispatch for ~100 ms, so every request due meanwhile went out late.
    Collecting once before t0 and freezing the survivors leaves the run's own objects
    to collect; ``gc.unfreeze()`` after the run gives the rest back.
    """
    gc.collect()
    gc.freeze()
