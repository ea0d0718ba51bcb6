"""``replay --slo-stop``: stop a run once an objective is missed whatever the rest does.

A request answered over a latency (or TTFT) limit stays over it, and an error stays
an error. So partway through a run some objectives are already decided: when so many
of the run's ``total`` requests were answered over the limit that the report would
put the percentile's whole 95% bootstrap interval above it *even if every request
still to come were instant*, the objective is missed, and replaying the rest (or
waiting out a queue of answers) measures nothing more. The report's interval
(``report/quantiles.py``) is exact in distribution: a replicate of the percentile at
or under the limit needs the order statistic ``U(k+1)`` of ``n`` uniforms, which is
Beta(k + 1, n - k), to land below the share of requests under the limit. The stop
asks that chance to be under ``CHANCE`` (1%, against the interval's 2.5% tail, so the
report's 2,000 draws see the same), with ``n`` the whole run: fewer answered
requests only make the share over the limit larger.

Error rate: missed once the errors so far exceed the limit's share of ``total``.
Objectives relative to the recording (``1.2x``) and figures other than latency and
TTFT are not watched: they are judged after the run as usual.

Requests still in flight at the stop are cancelled; their result records keep how
long they had been in flight (``duration_ns``), a lower bound on their latency.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Literal

from tailreplay.replayer.schedule import Plan, ScheduleConfig
from tailreplay.traces.archive.record import Record

__all__ = [
    "CHANCE",
    "MissWatch",
    "SloStop",
    "Watched",
    "WatchedMetric",
    "enough_over",
    "errors_over",
    "most_scheduled",
]

CHANCE = 0.01
WatchedMetric = Literal["latency", "ttft", "error_rate"]


@dataclass(frozen=True)
class Watched:
    """One objective the run watches."""

    text: str
    metric: WatchedMetric
    quantile: float | None
    """0.99 for P99; None for error_rate."""
    limit: float
    """Milliseconds, or a share (error_rate)."""


@dataclass(frozen=True)
class SloStop:
    watched: list[Watched]
    after_sending: bool
    """Send the whole schedule first, then stop waiting for answers (``after-sending``);
    else stop sending too (``now``)."""


def most_scheduled(the_plan: Plan, sc: ScheduleConfig) -> int:
    """The most requests the run can send: its plan, times ``--amplify``'s copies (a
    fractional copy counted whole, so the count is never under the truth)."""
    return the_plan.count * math.ceil(sc.amplify)


def enough_over(total: int, quantile: float) -> int | None:
    """The fewest requests over a limit, of ``total``, that put the percentile's
    bootstrap interval above it whatever the others are (None: not even all of them)."""
    from scipy.special import betainc  # type: ignore[import-untyped]  # only when watching

    n = total
    k = math.floor((n - 1) * quantile)  # the order statistic under numpy's percentile
    for over in range(max(n - k, 1), n + 1):
        # P(U(k+1) < (n - over) / n): a replicate lands among the requests under the limit.
        if over == n or float(betainc(k + 1, n - k, (n - over) / n)) < CHANCE:
            return over
    return None


def errors_over(total: int, limit: float) -> int:
    """The fewest errors of ``total`` whose share is over ``limit``, in the report's own
    arithmetic (``errors / requests <= limit`` passes): 0.29 * 100 is 28.999..., and
    29 of 100 meet a 29% limit."""
    if total <= 0:
        return 1
    errors = max(math.floor(limit * total) - 1, 0)
    while errors / total <= limit:
        errors += 1
    return errors


class MissWatch:
    """Counts the results against each watched objective; ``missed`` is set (and
    ``reason`` says which and why) once one is missed whatever the rest does."""

    def __init__(self, stop: SloStop, total: int) -> None:
        self.total = total
        self.watched = watched = stop.watched
        self.after_sending = stop.after_sending
        self.needed = [
            enough_over(total, w.quantile)
            if w.quantile is not None
            else errors_over(total, w.limit)
            for w in watched
        ]
        self.over = [0] * len(watched)
        self.missed = asyncio.Event()
        self.reason: str | None = None

    async def stop_run(self, stopping: asyncio.Event, sent_all: asyncio.Event) -> None:
        """Set ``stopping`` once an objective is missed (after-sending: not before
        ``sent_all``, so the load keeps its shape)."""
        if self.after_sending:
            await sent_all.wait()
        await self.missed.wait()
        stopping.set()

    def observe(self, record: Record) -> None:
        if self.reason is not None or record.error == "cancelled":
            return
        failed = record.is_error
        for i, w in enumerate(self.watched):
            if w.metric == "error_rate":
                hit = failed
            elif failed:
                continue
            elif w.metric == "latency":
                hit = record.duration_ns is not None and record.duration_ns > w.limit * 1e6
            else:
                hit = (
                    bool(record.stream)
                    and record.ttfb_ns is not None
                    and (record.ttfb_ns > w.limit * 1e6)
                )
            if not hit:
                continue
            self.over[i] += 1
            needed = self.needed[i]
            if needed is not None and self.over[i] >= needed:
                what = "failed" if w.metric == "error_rate" else f"over {w.limit:,.0f} ms"
                self.reason = (
                    f"{w.text} was missed whatever the rest does: {self.over[i]:,} "
                    f"requests {what}, of {self.total:,} at most"
                )
                self.missed.set()
                return
