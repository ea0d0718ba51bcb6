"""A replay's configuration: everything ``run`` needs, built by the command line or the
Python API (``tailreplay.studies.replay``), including the parts the replayer does not
build itself: the built-in simulator to start when there is no target, and the span
exporter (both handed in, so this package imports neither)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

from tailreplay.replayer import settings
from tailreplay.replayer.builtin import BuiltinTarget
from tailreplay.replayer.dispatch import SpanSink
from tailreplay.replayer.lookahead import LOOKAHEAD_BYTES, LOOKAHEAD_ITEMS
from tailreplay.replayer.request import BodyEdits
from tailreplay.replayer.retry import RetryPolicy
from tailreplay.replayer.schedule import ScheduleConfig
from tailreplay.replayer.scrape import ScrapeTarget
from tailreplay.replayer.slo_stop import SloStop
from tailreplay.replayer.users import Users
from tailreplay.traces.results.client_health import DEFAULT_LAG_LIMIT_MS

__all__ = ["ReplayConfig", "Say", "SpanFactory"]

Say = Callable[[str], None]
SpanFactory = Callable[[tuple[str, int], Say], AbstractAsyncContextManager[SpanSink]]
"""Given the target's (host, port) and ``say``: the span sink for the run, entered for
its length (``exporters.span_process.replay_spans`` with the OTLP options bound)."""


@dataclass
class ReplayConfig:
    """A replay's run; the options that set it declare its defaults
    (``replayer/settings.py``, ``traces/results/client_health.LAG_LIMIT``)."""

    schedule: ScheduleConfig
    target: str | None = None
    """Base URL; None: the built-in simulator (``builtin_target``), or nothing for a dry run."""
    command: tuple[str, ...] | None = None
    """The command line as the result's header keeps it (header values masked)."""
    force_lengths: bool = settings.FORCE_LENGTHS.value()
    headers: dict[str, str] = field(default_factory=dict)
    model_map: dict[str, str] = field(default_factory=dict)
    body_edits: BodyEdits | None = None
    """--body-set / --body-drop, applied last to every JSON body."""
    max_inflight: int = settings.MAX_INFLIGHT.value()
    connections: int = settings.CONNECTIONS.value()
    timeout_s: float = settings.TIMEOUT.value()
    out: Path | None = None
    start_at_ns: int | None = None
    allow_upstream: bool = False
    new_trace_ids: bool = False
    dry_run: bool = False
    offline: bool = False
    """Served by the built-in simulator's engine in-process on a virtual clock
    (``replayer/offline.py``), not sent."""
    builtin_target: BuiltinTarget | None = None
    """The built-in simulator, for a run without ``target`` (picklable for --workers)."""
    live: bool = False
    """A live progress display (a terminal); else plain progress lines."""
    spans: SpanFactory | None = None
    """One span per request sent, when set."""
    scrape: list[ScrapeTarget] = field(default_factory=list)
    """Read these metrics pages during the run, into the results' scrape file."""
    metrics_listen: tuple[str, int] | None = None
    """Serve Prometheus metrics on HOST:PORT while the replay runs."""
    metrics_linger_s: float = settings.METRICS_LINGER.value()
    """...and this long after it (Prometheus scrapes every 15 s or so)."""
    lag_limit_ms: float = DEFAULT_LAG_LIMIT_MS
    """Dispatch lag P99 above this: the client was the bottleneck, and the run says so."""
    preflight: bool = settings.PREFLIGHT.value()
    """Probe the target with the first request before the schedule starts."""
    fail_fast: int = settings.FAIL_FAST.value()
    """Stop when the first N results all failed the same way (0: never)."""
    duration_s: float | None = None
    """Send only the requests due within this much replay time (--duration)."""
    users: Users | None = None
    """Closed loop: this many users, each waiting for its answer (None: open loop)..."""
    think_s: float | None = settings.THINK.value()
    """...and this long after it before its next request (None: the recorded gap)."""
    retry: RetryPolicy | None = None
    """Retry failed requests as a client would (``--retries policy``); None: never."""
    replay_aborts: bool = settings.CLIENT_ABORTS.value() == "replay"
    """Abandon recorded client aborts at the same point (``--client-aborts replay``)."""
    lookahead_items: int = LOOKAHEAD_ITEMS
    """Requests built before they are due, at most (0: each is built when due)..."""
    lookahead_bytes: int = LOOKAHEAD_BYTES
    """...and their bodies' bytes at most (``replayer/lookahead.py``)."""
    event_loop: str = settings.EVENT_LOOP.value()
    """The loop the run (each --workers process's too) runs on (``tailreplay.eventloop``)."""
    slo_stop: SloStop | None = None
    """Stop once a watched objective is missed whatever the rest does (``--slo-stop``)."""
