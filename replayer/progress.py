"""The replay's progress while it runs: a live line on a terminal, else a line every 2 s.

Read off the dispatcher's counters and its recent dispatch lags, on the replay's
own loop; nothing here touches the send path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np

from tailreplay.replayer.dispatch import Dispatcher

__all__ = ["show_progress", "status_line"]

PROGRESS_EVERY_S = 2.0
LIVE_EVERY_S = 0.5
_RECENT_LAGS = 5000


def status_line(
    d: Dispatcher, started: float, total: int | None = None, length_s: float | None = None
) -> Callable[[], str]:
    """A function returning the current status line (the rate since its last call).
    With ``total`` (the requests the schedule will make due) and ``length_s`` (its
    length in replay seconds), the line says how far along it is and how long is
    left of the schedule (the last answers may come after)."""
    last = {"t": time.monotonic(), "completed": 0}

    def status() -> str:
        s = d.stats
        now = time.monotonic()
        rate = (s.completed - last["completed"]) / max(now - last["t"], 1e-9)
        last.update(t=now, completed=s.completed)
        recent = np.frombuffer(d.lags_ns[-_RECENT_LAGS:], dtype=np.int64)
        lag = f"{np.percentile(recent, 99) / 1e6:.1f} ms" if recent.size else "-"
        due = f"due {s.due:,}"
        if total:  # a fractional --amplify draws copies: the total is about
            due += f" of {total:,}" if s.due <= total else ""
            due += f" ({min(s.due / total, 1.0):.0%})"
        left = ""
        if d.stopping.is_set():  # nothing more will be sent: no time is left to count
            left = "  stopping"
        elif length_s is not None:
            left = f"  {_clock(max(length_s - (now - started), 0.0))} left"
        return (
            f"  {now - started:6.1f}s  {due}  sent {s.sent:,}  done {s.completed:,}  "
            f"in flight {s.in_flight:,}  errors {s.errors:,}  dropped {s.dropped:,}  "
            f"{rate:,.0f}/s  lag p99 {lag}{left}"
        )

    return status


def _clock(seconds: float) -> str:
    """``1h02m``, ``4m05s``, ``12s``."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


async def show_progress(status: Callable[[], str], say: Callable[[str], None], live: bool) -> None:
    """A live line on a terminal (rich), else a plain line every PROGRESS_EVERY_S; runs
    until cancelled."""
    if not live:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            say(status())
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    with Live(Text(status()), console=Console(stderr=True), auto_refresh=False) as display:
        try:
            while True:
                await asyncio.sleep(LIVE_EVERY_S)
                display.update(Text(status()), refresh=True)
        finally:
            display.update(Text(status()), refresh=True)
