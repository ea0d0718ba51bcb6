"""Whether a replay's results are the whole run: a result archive whose header says
how many requests the schedule held (``ReplayHeader.scheduled``) and that holds
fewer due requests was cut short — by Ctrl-C, ``--fail-fast`` or ``--slo-stop``.

Its figures are of the requests sent, which are not the recorded load: every view
says so first (a warning, the headline), and an SLO on it is not judged unless the
user asks for it (``report --judge-partial``; ``report/verdict.py``).
"""

from __future__ import annotations

from tailreplay.report.model import Partial
from tailreplay.report.side import Side

__all__ = ["cut_short", "partial_line"]


def cut_short(side: Side) -> Partial | None:
    """How much of the schedule the replayed side holds, when it holds less than all;
    None when whole, or when no header says what the whole was."""
    if not side.is_replay or not side.headers:
        return None
    schedules = [r.scheduled for r in side.replays]
    if any(s is None for s in schedules):
        return None  # a shard, a --duration cut, a closed loop, an older file
    scheduled = sum(s for s in schedules if s is not None)
    # First attempts: what was due (a retry is another attempt at one of them; a
    # request never sent for want of a slot is a result too, "dropped").
    due = int((~side.retry).sum()) + sum(p.requests for p in side.idle.paths.values())
    if due >= scheduled:
        return None
    return {"scheduled": scheduled, "due": due, "unsent": scheduled - due}


def partial_line(partial: Partial) -> str:
    return (
        f"partial run: {partial['unsent']:,} of {partial['scheduled']:,} scheduled requests "
        "were never sent (interrupted or stopped); the figures are of the "
        f"{partial['due']:,} due before it stopped"
    )
