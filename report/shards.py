"""A sharded replay's shards: how far behind schedule each one started, and which part
of the dispatch lag a late start explains.

``replay --shard i/N --start-at T`` on N machines (``tailreplay deploy job``), or
``--workers N`` on one, sends one schedule from N processes, and every result
record names its ``shard``. A process that starts after T keeps that schedule:
its first requests go out at once, late by the delay, and carry it as lag. Merged,
that lag reads like a client too slow to send on time. So a shard whose first
request went out more than ``LATE_START_S`` behind schedule started late, and its
*catch-up* is left out of the client verdict: the requests it sent before one
left within the lag limit of its due time, and none sent more than its delay
after its first send. What remains is the lag a busy machine explains: a client
that never gets back on schedule is judged on everything after that bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.errors import UsageError
from tailreplay.report.model import LagCause, ShardRow, Shards
from tailreplay.report.side import Side
from tailreplay.traces.archive.replay_header import ReplayHeader, is_replay
from tailreplay.traces.results.client_health import ClientVerdict

__all__ = [
    "LATE_START_S",
    "SETTLED_AFTER_S",
    "ShardLags",
    "check_one_run",
    "missing_shards",
    "shard_lags",
]

LATE_START_S = 1.0
"""A shard whose first request went out more than this behind schedule started late."""
SETTLED_AFTER_S = 1.0
"""A shard's lag is also shown over what it sent after this much of its own sending."""

Array = npt.NDArray[Any]


@dataclass
class ShardLags:
    """The shards of one replayed side and the requests the client verdict leaves out."""

    rows: list[ShardRow]
    count: int
    catch_up: Array
    """Per request of the side: part of a late shard's catch-up."""
    lag_p99_ms: float | None
    """Over every request sent, the catch-up included."""
    lag_limit_ms: float
    behind: str
    """What the shards' common schedule starts at, in words."""

    @property
    def late(self) -> list[ShardRow]:
        return [r for r in self.rows if r["late"]]

    def judged(self, sent: Array) -> Array:
        """The requests whose lag the client verdict reads: those ``sent`` but the
        catch-up; all of them when nothing else was sent."""
        rest: Array = sent & ~self.catch_up
        return rest if rest.any() else sent

    def cause(self, client: ClientVerdict | None) -> LagCause | None:
        """Why the lag P99 over every request is above the limit (None: it is not)."""
        if client is not None and client["client_bound"]:
            return "client"
        over = self.lag_p99_ms is not None and self.lag_p99_ms > self.lag_limit_ms
        return "late start" if over and self.late else None

    def block(self, client: ClientVerdict | None) -> Shards:
        """The report's ``shards``."""
        return {
            "count": self.count,
            "late_start_s": LATE_START_S,
            "rows": self.rows,
            "late": [r["label"] for r in self.late],
            "lag_p99_ms": self.lag_p99_ms,
            "catch_up": int(self.catch_up.sum()),
            "lag_cause": self.cause(client),
        }

    def lines(self, client: ClientVerdict | None) -> list[str]:
        """A line per late shard, and one saying whether the late starts explain the lag."""
        late = self.late
        lines = [
            f"shard {r['label']} started {(r['first_lag_ms'] or 0) / 1e3:.1f} s behind "
            f"{self.behind}: its first requests carry that delay as lag ({r['catch_up']:,} "
            "sent before it was back on schedule)"
            for r in late
        ]
        if not late or client is None or client["lag_p99_ms"] is None:
            return lines
        which = "the late start" + ("s of shards " if len(late) > 1 else " of shard ")
        which += ", ".join(r["label"] for r in late)
        without = (
            f"without the catch-up ({int(self.catch_up.sum()):,} requests) the P99 is "
            f"{client['lag_p99_ms']:,.1f} ms (limit {self.lag_limit_ms:g} ms)"
        )
        cause = self.cause(client)
        if cause == "client":
            verb = "do" if len(late) > 1 else "does"
            lines.append(f"{which} {verb} not explain the dispatch lag: {without}")
        elif cause == "late start":
            lines.append(
                f"the dispatch lag P99 of {self.lag_p99_ms:,.0f} ms comes from {which}: "
                f"{without}, so the client kept up"
            )
        return lines


def shard_lags(side: Side, lag_limit_ms: float) -> ShardLags | None:
    """Each shard's start and lag, and the late shards' catch-up (None: the records
    name no shard, an unsharded replay)."""
    has = side.shard >= 0
    if not has.any():
        return None
    shards, requests = np.unique(side.shard[has], return_counts=True)
    count = _count(side, int(shards[-1]))
    sent = np.flatnonzero(has & (side.lag_ns >= 0) & (side.start_ns >= 0))
    # Each shard's sends in send order, one shard after another.
    order = sent[np.lexsort((side.start_ns[sent], side.shard[sent]))]
    firsts = np.searchsorted(side.shard[order], shards)
    ends = np.append(firsts[1:], order.size)
    catch_up = np.zeros(side.n, dtype=bool)
    limit_ns = lag_limit_ms * 1e6
    rows = []
    for shard, n, lo, hi in zip(shards, requests, firsts, ends, strict=True):
        rows.append(_row(side, (int(shard), count), int(n), order[lo:hi], limit_ns, catch_up))
    lags = side.lag_ns[sent]
    return ShardLags(
        rows=rows,
        count=count,
        catch_up=catch_up,
        lag_p99_ms=float(np.percentile(lags, 99)) / 1e6 if lags.size else None,
        lag_limit_ms=lag_limit_ms,
        behind="the workers' common start" if _workers(side) else "--start-at",
    )


def _row(
    side: Side,
    shard: tuple[int, int],
    requests: int,
    sent: Array,
    limit_ns: float,
    catch_up: Array,
) -> ShardRow:
    """Shard ``i/N``'s row from its ``sent`` requests (in send order); marks its catch-up."""
    row: ShardRow = {
        "shard": shard[0],
        "label": f"{shard[0]}/{shard[1]}",
        "requests": requests,
        "first_lag_ms": None,
        "lag_p50_ms": None,
        "lag_p99_ms": None,
        "lag_p99_after_first_s_ms": None,
        "late": False,
        "catch_up": 0,
    }
    if not sent.size:
        return row
    lags, starts = side.lag_ns[sent], side.start_ns[sent]
    p50, p99 = np.percentile(lags, [50, 99]) / 1e6
    settled = lags[starts >= starts[0] + round(SETTLED_AFTER_S * 1e9)]
    delay = int(lags[0])
    row["first_lag_ms"], row["lag_p50_ms"], row["lag_p99_ms"] = delay / 1e6, float(p50), float(p99)
    if settled.size:
        row["lag_p99_after_first_s_ms"] = float(np.percentile(settled, 99)) / 1e6
    if delay > LATE_START_S * 1e9:
        end = _caught_up(starts, lags, delay, limit_ns)
        catch_up[sent[:end]] = True
        row["late"], row["catch_up"] = True, end
    return row


def _caught_up(starts: Array, lags: Array, delay: int, limit_ns: float) -> int:
    """How many of a late shard's sends (in send order) are its catch-up: those before
    the first that left within the lag limit, and none sent more than ``delay`` after
    the first (a client that cannot catch up is judged on the rest)."""
    on_time = np.flatnonzero(lags <= limit_ns)
    back = int(on_time[0]) if on_time.size else int(lags.size)
    bound = int(np.searchsorted(starts, starts[0] + delay, side="left"))
    return min(back, bound)


def _workers(side: Side) -> bool:
    return any(r.workers is not None for r in side.replays)


def _count(side: Side, highest: int) -> int:
    """N of ``i/N``: the headers' (``--shard i/N``, or ``--workers N``), at least the
    highest index + 1."""
    counts = [highest + 1]
    for r in side.replays:
        if r.workers is not None:
            counts.append(r.workers)
        if r.shard is not None:
            counts.append(r.shard[1])
    return max(counts)


def check_one_run(paths: Sequence[str], headers: Sequence[dict[str, Any]]) -> None:
    """Refuse replay results that are not the shards of one run, each once: a rerun
    under the same name (``deploy job --name``) leaves files of two runs side by side,
    and read together they would be one report of neither. Raises ``UsageError``."""
    runs = [(p, ReplayHeader.read(h)) for p, h in zip(paths, headers, strict=True) if is_replay(h)]
    # A recording given among the results (an empty file, header and all, is skipped).
    others = [p for p, h in zip(paths, headers, strict=True) if h and not is_replay(h)]
    if runs and others:
        other = others[0]
        raise UsageError(
            f"{other} is not a replay's results, {runs[0][0]} is: give the recording with "
            "--recorded, the results alone as RESULTS"
        )
    if len(runs) < 2:
        return
    first_path, first = runs[0]
    for path, header in runs[1:]:
        differs = first.differs_from(header)
        if differs is not None:
            key, mine, theirs = differs
            raise UsageError(
                f"{first_path} and {path} are results of different replays ({key} "
                f"{mine} against {theirs}); report the shards of one run together"
            )
    seen: dict[tuple[int, int], str] = {}
    for path, header in runs:
        shard = header.shard or (0, 1)
        if shard in seen:
            label = "/".join(map(str, shard))
            raise UsageError(
                f"{seen[shard]} and {path} are both shard {label}: results of two runs "
                "(or one given twice); report each shard of one run once"
            )
        seen[shard] = path


_LISTED = 10
"""Missing shards named at most; the rest are counted."""


def missing_shards(headers: Sequence[dict[str, Any]]) -> str | None:
    """A line naming the shards of a ``--shard i/N`` run whose results were not given
    (None: every shard's are, or the results are not sharded): the report would
    otherwise read as the whole run's."""
    given: set[int] = set()
    count = 0
    for header in headers:
        shard = ReplayHeader.read(header).shard
        if is_replay(header) and shard is not None and shard[1] > 1:
            given.add(shard[0])
            count = shard[1]
    missing = [i for i in range(count) if i not in given]
    if not missing:
        return None
    labels = ", ".join(f"{i}/{count}" for i in missing[:_LISTED])
    if len(missing) > _LISTED:
        labels += f" and {len(missing) - _LISTED:,} more"
    return (
        f"shard{'s' if len(missing) > 1 else ''} {labels} missing: the results given are "
        f"{len(given)} of the run's {count} shards, so this report covers part of its load"
    )
