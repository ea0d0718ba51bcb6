"""Which ``--slo`` objectives a run can watch as it goes, and what ``replay --slo-stop``
watches (``replayer/slo_stop.py`` does the watching)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from tailreplay.errors import UsageError
from tailreplay.replayer.slo_stop import SloStop, Watched, WatchedMetric
from tailreplay.report.slo import Objective
from tailreplay.traces.results.figures import PERCENTILES

__all__ = ["slo_stop_config", "watchable"]


def watchable(objective: Objective) -> bool:
    """An objective ``--slo-stop`` can watch during a run: latency, TTFT or error rate,
    with an absolute limit (a relative one needs the recording's value)."""
    return objective.metric in ("latency", "ttft", "error_rate") and not objective.relative


def slo_stop_config(
    when: str | None,
    objectives: Sequence[Objective],
    *,
    sharded: bool,
    closed_loop: bool,
    retries: bool,
    min_score: float = 1.0,
) -> SloStop | None:
    """What ``--slo-stop`` watches; None without it. Refused where the run's request count
    is not the replay's own (shards, workers), not fixed (users) or not one result per
    request (a retry policy)."""
    if when is None:
        return None
    clashes = [
        (min_score < 1, "--slo-min-score under 1: one objective missed may still pass"),
        (sharded, "--shard or --workers: each process sees part of the run"),
        (closed_loop, "--users: the run has no fixed schedule"),
        (retries, "--retries policy: a request may have several results"),
    ]
    for clash, why in clashes:
        if clash:
            raise UsageError(f"--slo-stop does not go with {why}")
    watched = [
        # cast: watchable() admits only latency, ttft and error_rate.
        Watched(
            o.text,
            cast(WatchedMetric, o.metric),
            None if o.quantile is None else PERCENTILES[o.quantile] / 100,
            o.limit,
        )
        for o in objectives
        if watchable(o)
    ]
    if not watched:
        raise UsageError(
            "--slo-stop needs a --slo on latency, ttft or error_rate with a limit "
            "in ms or % (not relative to the recording)"
        )
    return SloStop(watched, after_sending=when == "after-sending")
