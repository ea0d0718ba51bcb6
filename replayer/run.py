"""A whole replay: plan, target, dispatch, results, summary.

``run(config)`` is what ``tailreplay replay`` calls; everything it needs comes in
through ``ReplayConfig``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from yarl import URL

from tailreplay.errors import RunFailed, UsageError
from tailreplay.exporters.otlp import OtlpOptions
from tailreplay.exporters.span_process import SpanProcess
from tailreplay.private import open_private
from tailreplay.prometheus import serve_metrics
from tailreplay.replayer.dispatch import Dispatcher
from tailreplay.replayer.metrics import ReplayMetrics
from tailreplay.replayer.prompts import PromptMaker
from tailreplay.replayer.request import BodyEdits, RequestBuilder
from tailreplay.replayer.schedule import Plan, ScheduleConfig, plan, schedule
from tailreplay.replayer.summary import ResultCollector
from tailreplay.replayer.transport import HttpTransport, Transport
from tailreplay.traces.format import make_header
from tailreplay.traces.reader import read_header
from tailreplay.traces.record import Record
from tailreplay.traces.writer import ArchiveWriter

if TYPE_CHECKING:
    from tailreplay.exporters.otlp import Telemetry
    from tailreplay.exporters.spans import SpanSink

__all__ = ["ReplayConfig", "ReplayOutcome", "run"]

STOP_GRACE_S = 5.0
PROGRESS_EVERY_S = 2.0
LIVE_EVERY_S = 0.5


@dataclass
class ReplayConfig:
    schedule: ScheduleConfig
    target: str | None = None
    force_lengths: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    model_map: dict[str, str] = field(default_factory=dict)
    body_edits: BodyEdits | None = None
    """--body-set / --body-drop, applied last to every JSON body."""
    max_inflight: int = 4096
    connections: int = 1024
    timeout_s: float = 300.0
    out: Path | None = None
    json_out: Path | None = None
    start_at_ns: int | None = None
    allow_upstream: bool = False
    new_trace_ids: bool = False
    dry_run: bool = False
    sim_args: tuple[str, ...] = ()
    live: bool = False
    """A live progress display (a terminal); else plain progress lines."""
    otlp: OtlpOptions | None = None
    """Export one span per request sent, when enabled (an endpoint is set)."""
    metrics_listen: tuple[str, int] | None = None
    """Serve Prometheus metrics on HOST:PORT while the replay runs."""
    metrics_linger_s: float = 0.0
    """...and this long after it (Prometheus scrapes every 15 s or so)."""


@dataclass
class ReplayOutcome:
    summary: dict[str, Any]
    plan: Plan
    target: str | None
    interrupted: bool = False


def _check_target(config: ReplayConfig, target: str) -> None:
    """Refuse to replay at the deployment the archive was captured from."""
    t = URL(target)
    for path in config.schedule.paths:
        upstream = read_header(path).get("upstream")
        if not isinstance(upstream, str):
            continue
        u = URL(upstream)
        if (u.host, u.port) == (t.host, t.port) and not config.allow_upstream:
            raise UsageError(
                f"--target {target} is the upstream this archive was captured from "
                f"({upstream}); pass --allow-upstream if you really mean to replay there"
            )


def _progress(d: Dispatcher, started: float) -> Callable[[], str]:
    """A function returning the current status line (rate since its last call)."""
    last = {"t": time.monotonic(), "completed": 0}

    def status() -> str:
        s = d.stats
        now = time.monotonic()
        rate = (s.completed - last["completed"]) / max(now - last["t"], 1e-9)
        last.update(t=now, completed=s.completed)
        recent = np.frombuffer(d.lags_ns[-5000:], dtype=np.int64) if d.lags_ns else None
        lag = (
            f"{np.percentile(recent, 99) / 1e6:.1f} ms"
            if recent is not None and recent.size
            else "-"
        )
        return (
            f"  {now - started:6.1f}s  due {s.due:,}  sent {s.sent:,}  done {s.completed:,}  "
            f"in flight {s.in_flight:,}  errors {s.errors:,}  dropped {s.dropped:,}  "
            f"{rate:,.0f}/s  lag p99 {lag}"
        )

    return status


async def _show_progress(status: Callable[[], str], say: Callable[[str], None], live: bool) -> None:
    """A live line on a terminal (rich), else a plain line every PROGRESS_EVERY_S."""
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


async def run(
    config: ReplayConfig,
    say: Callable[[str], None],
    transport: Transport | None = None,
    telemetry: Telemetry | None = None,
) -> ReplayOutcome:
    """Replay ``config``; ``transport`` and ``telemetry`` replace the real ones in tests."""
    sc = config.schedule
    if config.target is not None and not config.dry_run:
        _check_target(config, config.target)
    the_plan = plan(sc)
    if the_plan.tail_by == "output_tokens":
        say("note: the archive records no latencies; the tail is chosen by recorded output tokens")
    elif the_plan.tail_by is None:
        say("note: the archive records neither latencies nor output tokens; no tail stretch")
    if not 1.5 <= sc.tail_stretch <= 2.0 and sc.tail_stretch != 1.0:
        why = (
            "too weak to keep the tail's pressure"
            if sc.tail_stretch < 1.5
            else "it distorts the workload"
        )
        say(f"warning: --tail-stretch {sc.tail_stretch:g} is outside 1.5-2.0 ({why})")

    collector = ResultCollector(sc.tail_stretch, sc.tail_quantile)
    writer = None
    if config.out is not None:
        writer = ArchiveWriter(
            config.out,
            header=make_header(
                "replay" if not config.dry_run else "replay:dry-run",
                upstream=config.target,
                extra={
                    "speed": str(sc.speed),
                    "tail_stretch": sc.tail_stretch,
                    "tail_quantile": sc.tail_quantile,
                    "amplify": sc.amplify,
                    "shard": list(sc.shard),
                    # What was replayed, so `tailreplay report` finds the recorded side.
                    "archives": [str(Path(p).resolve()) for p in sc.paths],
                },
            ),
            # A dry run produces results far faster than they can be written: it waits
            # for the writer. A live run never does (its pace is the schedule's).
            queue_size=10_000 if config.dry_run else 100_000,
            block_when_full=config.dry_run,
        )

    def on_result(record: Record) -> None:
        collector.add(record)
        if writer is not None:
            writer.append(record)

    try:
        if config.dry_run:
            _dry_run(config, the_plan, on_result)
            return ReplayOutcome(collector.summary(collector.requests, 0), the_plan, None)
        with contextlib.ExitStack() as stack:
            target = config.target
            if target is None:
                from tailreplay.sim.launcher import sim_process

                target = stack.enter_context(sim_process(config.sim_args))
                say(f"no --target: replaying against the built-in simulator at {target}")
            return await _live(
                config, the_plan, target, on_result, collector, say, transport, telemetry
            )
    finally:
        if writer is not None:
            writer.close()


def _dry_run(config: ReplayConfig, the_plan: Plan, on_result: Callable[[Record], None]) -> None:
    t0 = config.start_at_ns if config.start_at_ns is not None else the_plan.first_start_ns
    shard = config.schedule.shard[0] if config.schedule.shard[1] > 1 else None
    for item in schedule(config.schedule, the_plan):
        r = item.record
        on_result(
            Record(
                start_ns=t0 + round(item.due_s * 1e9),
                intended_ns=t0 + round(item.due_s * 1e9),
                method=r.method,
                path=r.path,
                model=r.model,
                stream=r.stream,
                input_tokens=r.input_tokens,
                max_tokens=item.budget,
                prefix_hashes=r.prefix_hashes,
                orig_trace_id=r.trace_id,
                orig_span_id=r.span_id,
                tail=item.tail,
                shard=shard,
            )
        )


async def _live(
    config: ReplayConfig,
    the_plan: Plan,
    target: str,
    on_result: Callable[[Record], None],
    collector: ResultCollector,
    say: Callable[[str], None],
    transport: Transport | None,
    telemetry: Telemetry | None,
) -> ReplayOutcome:
    sc = config.schedule
    transport = transport or HttpTransport(
        target, connections=config.connections, timeout_s=config.timeout_s
    )
    builder = RequestBuilder(
        model_map=config.model_map,
        force_lengths=config.force_lengths,
        prompts=PromptMaker(sc.seed),
        edits=config.body_edits,
    )
    metrics: ReplayMetrics | None = None

    def on_each(record: Record) -> None:
        on_result(record)
        if metrics is not None:
            metrics.observe(record)

    spans = _span_sink(config, target, say, telemetry)
    dispatcher = Dispatcher(
        transport,
        builder,
        headers=config.headers,
        max_inflight=config.max_inflight,
        new_trace_ids=config.new_trace_ids,
        shard=sc.shard[0] if sc.shard[1] > 1 else None,
        on_result=on_each,
        spans=spans,
    )
    async with contextlib.AsyncExitStack() as stack:
        if config.metrics_listen is not None:
            metrics = ReplayMetrics(dispatcher.stats)
            url = await stack.enter_async_context(
                serve_metrics(metrics.registry, *config.metrics_listen)
            )
            say(f"metrics on {url}/metrics")
        if isinstance(spans, SpanProcess):
            await spans.attach()
            stack.push_async_callback(_close_spans, spans, say)
        elif telemetry is not None:
            stack.callback(telemetry.close)
        outcome = await _dispatch(config, the_plan, target, dispatcher, transport, collector, say)
        if metrics is not None and config.metrics_linger_s > 0 and not outcome.interrupted:
            say(f"serving the final metrics for {config.metrics_linger_s:g} s")
            await asyncio.sleep(config.metrics_linger_s)
        return outcome


def _span_sink(
    config: ReplayConfig, target: str, say: Callable[[str], None], telemetry: Telemetry | None
) -> SpanSink | None:
    """Spans in a child process (SpanProcess); in this one only for a test's ``telemetry``."""
    url = URL(target)
    server = (url.host or "", url.port or 0)
    extra = {"tailreplay.replay.speed": str(config.schedule.speed)}
    if telemetry is not None:
        from opentelemetry.trace import SpanKind

        from tailreplay.exporters.spans import RecordSpans

        return RecordSpans(telemetry, kind=SpanKind.CLIENT, server=server, extra=extra)
    if config.otlp is None or not config.otlp.enabled:
        return None
    return SpanProcess(
        config.otlp, service="tailreplay-replay", server=server, extra=extra, say=say
    )


async def _close_spans(spans: SpanProcess, say: Callable[[str], None]) -> None:
    exported, lost = await spans.close()
    line = f"spans: {exported:,} exported to {spans.options.resolved_endpoint()}"
    say(line + (f", {lost:,} not delivered" if lost else ""))


async def _dispatch(
    config: ReplayConfig,
    the_plan: Plan,
    target: str,
    dispatcher: Dispatcher,
    transport: Transport,
    collector: ResultCollector,
    say: Callable[[str], None],
) -> ReplayOutcome:
    sc = config.schedule
    loop = asyncio.get_running_loop()
    interrupted = False

    def on_signal() -> None:
        nonlocal interrupted
        interrupted = True
        dispatcher.stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
    _freeze_heap()  # before t0: the collection it starts with can take a while
    lead_s = 0.2  # time to get going before the first request is due
    now_loop, now_wall = loop.time(), time.time_ns()
    t0_wall = now_wall + round(lead_s * 1e9)
    if config.start_at_ns is not None:
        wait_s = (config.start_at_ns - now_wall) / 1e9
        if wait_s < 0:
            say(f"warning: --start-at was {-wait_s:.1f} s ago; starting now")
        lead_s = max(wait_s, 0.0)
        # Shards share the start to the nanosecond: their due times are one schedule.
        t0_wall = config.start_at_ns if wait_s >= 0 else now_wall
    t0 = now_loop + lead_s
    which = f"shard {sc.shard[0]}/{sc.shard[1]} of " if sc.shard[1] > 1 else ""
    say(
        f"replaying {which}{the_plan.count:,} requests ({sc.speed}, tail "
        f"{the_plan.tail_count:,} x{sc.tail_stretch:g}) at {target}"
    )
    ticker = loop.create_task(
        _show_progress(_progress(dispatcher, time.monotonic()), say, config.live)
    )
    try:
        items: Iterator[Any] = schedule(sc, the_plan)
        await dispatcher.run(items, t0, t0_wall)
        if interrupted:
            await dispatcher.cancel_in_flight(STOP_GRACE_S)
    finally:
        gc.unfreeze()
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        await transport.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    s = dispatcher.stats
    summary = collector.summary(s.sent, s.dropped)
    if s.input_intended:
        summary["input_tokens_error"] = s.input_reported / s.input_intended - 1
    return ReplayOutcome(summary, the_plan, target, interrupted)


def _freeze_heap() -> None:
    """Keep what the process holds before the run out of the collector's walks during it.

    A full collection walks every tracked object in the process. Where the replay runs
    beside a large heap (a test session, a program that embeds it) one landed mid-run
    and stopped dispatch for ~100 ms, so every request due meanwhile went out late.
    Collecting once before t0 and freezing the survivors leaves the run's own objects
    to collect; ``gc.unfreeze()`` after the run gives the rest back.
    """
    gc.collect()
    gc.freeze()


def write_json(path: Path, summary: dict[str, Any]) -> None:
    with open_private(path) as f:
        json.dump(summary, f, indent=2)
        f.write("\n")


def print_summary(outcome: ReplayOutcome, say: Callable[[str], None] = print) -> None:
    s = outcome.summary

    def row(name: str, key: str) -> None:
        p = s.get(key)
        if p:
            cells = "  ".join(f"{q} {p[q]:9.1f}" for q in ("p50", "p95", "p99", "max"))
            say(f"  {name:<10} {cells} ms")

    errors = ", ".join(f"{k} {v:,}" for k, v in sorted(s["errors"].items())) or "none"
    rate = s["throughput_rps"]
    say(
        f"requests {s['requests']:,}  sent {s['sent']:,}  completed {s['completed']:,}  "
        f"dropped {s['dropped']:,}  errors: {errors}"
    )
    say(
        f"duration {s['duration_s']:.1f} s  throughput {rate:,.1f} req/s"
        if rate
        else f"duration {s['duration_s']:.1f} s"
    )
    row("latency", "latency_ms")
    row("service", "service_ms")
    row("TTFT", "ttft_ms")
    row("TPOT", "tpot_ms")
    row("lag", "lag_ms")
    t = s["tail"]
    quantile = f"P{t['quantile'] * 100:g}"
    say(f"tail: {t['count']:,} requests at or above {quantile}, output x{t['factor']:g}")
    if "input_tokens_error" in s:
        error = s["input_tokens_error"] * 100
        say(f"input tokens vs recorded: {error:+.2f}% (as the target counts them)")


def exit_code(outcome: ReplayOutcome) -> int:
    if outcome.interrupted:
        return 130
    s = outcome.summary
    if s["sent"] and not s["completed"]:
        return RunFailed.exit_code
    return 0
