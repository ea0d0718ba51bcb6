"""A whole replay: plan, target, dispatch, results.

``run(config)`` is what ``tailreplay replay`` calls; everything it needs comes in
through ``ReplayConfig``, including the parts the replayer does not build itself:
the built-in simulator to start when there is no target, and the span exporter
(both handed in by the command line, so this package imports neither).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from yarl import URL

from tailreplay.engine_metrics import scrape_path
from tailreplay.errors import InputError, NotMeasured, RunFailed, UsageError
from tailreplay.prometheus import serve_metrics
from tailreplay.replayer.builtin import builtin_started
from tailreplay.replayer.config import ReplayConfig, Say
from tailreplay.replayer.dispatch import MAX_INFLIGHT_BYTES, Dispatcher, DispatchStats
from tailreplay.replayer.health import LoopWatch, watched_verdict
from tailreplay.replayer.metrics import ReplayMetrics
from tailreplay.replayer.offline import serve_offline
from tailreplay.replayer.preflight import FailFast, archive_upstreams, probe, same_deployment
from tailreplay.replayer.progress import show_progress, status_line
from tailreplay.replayer.prompts import PromptMaker
from tailreplay.replayer.replay_summary import ReplaySummary
from tailreplay.replayer.request import RequestBuilder
from tailreplay.replayer.result_archive import result_writer
from tailreplay.replayer.results import result_record
from tailreplay.replayer.schedule import (
    MOST_INPUT_TOKENS,
    Plan,
    Planned,
    ScheduleConfig,
    first_burst,
    plan,
    schedule,
    until,
)
from tailreplay.replayer.scrape import resolve, scraping
from tailreplay.replayer.slo_stop import MissWatch
from tailreplay.replayer.slo_stop import most_scheduled as _scheduled
from tailreplay.replayer.summary import ResultCollector, lag_percentiles, mark_unsent
from tailreplay.replayer.ticks import spread_line
from tailreplay.replayer.transport import HttpTransport, Transport
from tailreplay.shared_options import ADVISED_TAIL_STRETCH
from tailreplay.traces.archive.reader import read_header
from tailreplay.traces.archive.record import Record
from tailreplay.traces.text.redact_targets import redact_url

__all__ = ["LATE_START_S", "LEAD_S", "ReplayOutcome", "freeze_heap", "run", "start_times"]

LEAD_S = 0.2
"""Time to get going before the first request is due."""
LATE_START_S = 10.0
"""How far past ``--start-at`` a run may start and still keep the shared schedule."""
STOP_GRACE_S = 5.0
WARM_CONNECTIONS = 32
"""Connections opened before t0 at most (the first requests of a burst would each pay a
connect), and no more than the first burst has requests (``schedule.first_burst``)."""


@dataclass
class ReplayOutcome:
    summary: ReplaySummary
    plan: Plan
    target: str | None
    interrupted: bool = False

    aborted: str | None = None
    """Why the replay stopped early by itself (``--fail-fast``)."""
    results_lost: str | None = None
    """What of the result archive (``--out``) could not be written (a full disk), and
    why: the run then exits 3, whatever it measured."""

    def __post_init__(self) -> None:
        # Every way a run ends says how many records it could not rebuild.
        self.summary.left_out = self.plan.refused

    @property
    def exit_code(self) -> int:
        """130 after Ctrl-C; 3 when results could not be written (``results_lost``);
        1 when ``--slo-stop`` stopped the run (an SLO missed); 5
        when the run could not measure its target: ``--fail-fast`` stopped it, or
        nothing sent was answered (a recorded client abort, replayed, was answered
        if its answer had begun when it left); else 0."""
        if self.interrupted:
            return 130
        if self.results_lost is not None:
            return InputError.exit_code
        if self.summary.slo_stop is not None:
            return RunFailed.exit_code
        if self.aborted or (self.summary.sent and not self.summary.answered):
            return NotMeasured.exit_code
        return 0


async def run(config: ReplayConfig, say: Say, transport: Transport | None = None) -> ReplayOutcome:
    """Replay ``config``; ``transport`` replaces the HTTP client (tests)."""
    sc = config.schedule
    if config.target is not None and not config.dry_run:
        _check_target(config, config.target)
    the_plan = plan(sc)
    _note_plan(the_plan, sc, say)
    collector = ResultCollector(
        sc.tail_stretch,
        sc.tail_quantile,
        timings=not config.dry_run,
        tail_by=the_plan.tail_by,
        tail_capped=the_plan.capped,
        context=sc.max_context,
    )
    writer = result_writer(config, the_plan)

    def on_result(record: Record) -> None:
        collector.add(record)
        if writer is not None:
            writer.append(record)

    # Ctrl-C (or SIGTERM) from here on ends the run cleanly at whatever stage it is:
    # starting the simulator, the preflight, or sending.
    loop = asyncio.get_running_loop()
    stop = _Stop(say)
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        outcome = await _run(config, the_plan, on_result, collector, say, transport, stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        if writer is not None:
            writer.close()
    if writer is not None and writer.stats.dropped:
        # A write that failed (a full disk), else a result the archive cannot hold (a
        # time stamped past its clock: an archive spanning a century, replayed now).
        error = writer.error
        why = (error.strerror or str(error)) if error is not None else "a value no archive holds"
        lost = writer.stats.dropped
        outcome.results_lost = (
            f"{config.out}: {lost:,} result{'s' if lost > 1 else ''} could not be written "
            f"({why}); it holds the others"
        )
    return outcome


async def _run(
    config: ReplayConfig,
    the_plan: Plan,
    on_result: Callable[[Record], None],
    collector: ResultCollector,
    say: Say,
    transport: Transport | None,
    stop: _Stop,
) -> ReplayOutcome:
    """The run as ``config`` asks for it: planned only, offline, or live."""
    sc = config.schedule
    if config.dry_run:
        _dry_run(config, the_plan, on_result, say)
        summary = collector.summary(0, 0)
        summary.dry_run = True
        return ReplayOutcome(summary, the_plan, None)
    if config.offline:
        return await _offline(config, the_plan, on_result, collector, say, stop)
    with contextlib.ExitStack() as stack:
        target = config.target
        if target is None:
            if config.builtin_target is None:
                raise UsageError("no --target, and no built-in simulator to replay against")
            target = stack.enter_context(builtin_started(config.builtin_target, the_plan, say))
        if stop.is_set:
            return _stopped_before_sending(sc, the_plan, target, collector)
        return await _live(config, the_plan, target, on_result, collector, say, transport, stop)


class _Stop:
    """Ctrl-C or SIGTERM was received; ``callbacks`` run when it is (the dispatcher's).

    The first says at once what it waits for (``in_flight``, up to ``STOP_GRACE_S``);
    a second cuts the wait short (``now_callbacks``). Either way the results, the
    summary and the report are written."""

    def __init__(self, say: Say) -> None:
        self.is_set = False
        self.now = False
        self.say = say
        self.callbacks: list[Callable[[], None]] = []
        self.now_callbacks: list[Callable[[], None]] = []
        self.in_flight: Callable[[], int] = lambda: 0

    def set(self) -> None:
        if self.is_set:
            if not self.now:
                self.now = True
                self.say("stopping now: the requests in flight are cancelled")
                for callback in self.now_callbacks:
                    callback()
            return
        self.is_set = True
        waiting = self.in_flight()
        if waiting:
            self.say(
                f"stopping: waiting up to {STOP_GRACE_S:g} s for {waiting:,} in flight "
                "(Ctrl-C again to stop now)"
            )
        else:
            self.say("stopping")
        for callback in self.callbacks:
            callback()


async def _offline(
    config: ReplayConfig,
    the_plan: Plan,
    on_result: Callable[[Record], None],
    collector: ResultCollector,
    say: Say,
    stop: _Stop,
) -> ReplayOutcome:
    """``--offline``: served by the built-in simulator's engine on a virtual clock."""
    builtin = config.builtin_target
    if builtin is None:
        raise UsageError("--offline serves the replay by the built-in simulator: no --target")
    described = builtin.describe(the_plan.longest)
    say(f"--offline: served in this process on a virtual clock ({described})")
    served = await serve_offline(config, builtin, the_plan, on_result, lambda: stop.is_set, say)
    summary = collector.summary(served, 0)
    if stop.is_set:
        mark_unsent(summary, config.schedule, the_plan, served, served, interrupted=True)
    return ReplayOutcome(summary, the_plan, OFFLINE_TARGET, interrupted=stop.is_set)


OFFLINE_TARGET = "offline"
"""What an ``--offline`` run names as its target: no URL was ever sent to."""


def _stopped_before_sending(
    sc: ScheduleConfig, the_plan: Plan, target: str, collector: ResultCollector
) -> ReplayOutcome:
    summary = collector.summary(0, 0)
    mark_unsent(summary, sc, the_plan, 0, 0)
    return ReplayOutcome(summary, the_plan, target, interrupted=True)


def _check_target(config: ReplayConfig, target: str) -> None:
    """Refuse to replay at the deployment the archive was captured from, however its
    host is spelled (``replayer/preflight.py``)."""
    if config.allow_upstream:
        return
    for path in config.schedule.paths:
        header = read_header(path, skip_corrupt=config.schedule.skip_corrupt)
        upstream = same_deployment(target, archive_upstreams(header))
        if upstream is not None:
            raise UsageError(
                f"--target {redact_url(target)} is the upstream this archive was captured from "
                f"({redact_url(upstream)}); pass --allow-upstream if you really mean to "
                "replay there"
            )


def _note_plan(the_plan: Plan, sc: ScheduleConfig, say: Say) -> None:
    """What the user should know of the plan before it runs: what reading the archives
    met, how the tail was chosen. First of all, a clock that logged in coarse ticks."""
    ticks = spread_line(the_plan.ticks, sc.spread_ticks)
    if ticks is not None:
        say(ticks)
    for line in the_plan.warnings:
        say(f"warning: {line}")
    if the_plan.refused:
        say(
            f"warning: {the_plan.refused:,} records left out: POSTs to routes no dialect "
            "serves, captured without their bodies (replayed only from a capture with "
            "--bodies redacted|full)"
        )
    if the_plan.tail_by == "service_demand":
        cost = sc.tail_cost
        say(
            "note: the archive records no latencies; the tail is chosen by service demand "
            f"({cost.input_ms:g} ms an input token + {cost.output_ms:g} ms an output token; "
            "--tail-cost)"
        )
    elif the_plan.tail_by is None:
        say("note: the archive records neither latencies nor token counts; no tail stretch")
    if the_plan.capped:
        say(
            f"note: {the_plan.capped:,} tail requests ask less than x{sc.tail_stretch:g}: "
            f"cut to fit the {sc.max_context:,}-token context"
        )
    if the_plan.inputs_cut:
        say(
            f"warning: {the_plan.inputs_cut:,} requests ask for more than "
            f"{MOST_INPUT_TOKENS:,} prompt tokens: their prompts are cut to that many"
        )
    if the_plan.over_context:
        say(
            f"warning: {the_plan.over_context:,} requests need more than the "
            f"{sc.max_context:,}-token context as recorded (the longest {the_plan.longest:,} "
            "tokens): the target will refuse them"
        )
    low, high = ADVISED_TAIL_STRETCH
    if not low <= sc.tail_stretch <= high and sc.tail_stretch != 1.0:
        weak = sc.tail_stretch < low
        why = "too weak to keep the tail's pressure" if weak else "it distorts the workload"
        say(f"warning: --tail-stretch {sc.tail_stretch:g} is outside {low:g}-{high:g} ({why})")


def _dry_run(
    config: ReplayConfig, the_plan: Plan, on_result: Callable[[Record], None], say: Say
) -> None:
    t0 = config.start_at_ns if config.start_at_ns is not None else the_plan.first_start_ns
    shard = config.schedule.shard[0] if config.schedule.shard[1] > 1 else None
    per_phase: Counter[str] = Counter()
    last_s = 0.0
    for item in until(schedule(config.schedule, the_plan, say), config.duration_s, []):
        on_result(result_record(item, t0 + round(item.due_s * 1e9), shard=shard))
        if item.phase is not None:
            per_phase[item.phase] += 1
        last_s = item.due_s
    for phase, seconds in config.schedule.speed.phase_seconds(last_s).items():
        n = per_phase[phase]
        if seconds > 0:
            say(f"phase {phase}: {n:,} requests in {seconds:,.1f} s, {n / seconds:,.2f} req/s")


async def _live(
    config: ReplayConfig,
    the_plan: Plan,
    target: str,
    on_result: Callable[[Record], None],
    collector: ResultCollector,
    say: Say,
    transport: Transport | None,
    stop: _Stop,
) -> ReplayOutcome:
    sc = config.schedule
    transport = transport or HttpTransport(
        target, connections=config.connections, timeout_s=config.timeout_s
    )
    builder = _builder(config)
    metrics: ReplayMetrics | None = None
    guard = FailFast(config.fail_fast)
    dispatcher: Dispatcher | None = None
    miss = MissWatch(config.slo_stop, _scheduled(the_plan, sc)) if config.slo_stop else None

    def on_each(record: Record) -> None:
        on_result(record)
        if miss is not None:
            miss.observe(record)
        if metrics is not None:
            metrics.observe(record)
        retried = config.retry is not None and config.retry.will_retry(record)
        if not retried and guard.observe(record) and dispatcher is not None:
            dispatcher.stopping.set()

    if config.preflight:
        await _preflight(config, the_plan, transport, builder, say, stop)
    if stop.is_set:
        await transport.close()
        return _stopped_before_sending(sc, the_plan, target, collector)

    async with contextlib.AsyncExitStack() as stack:
        spans = None
        if config.spans is not None:
            url = URL(target)
            spans = await stack.enter_async_context(
                config.spans((url.host or "", url.port or 0), say)
            )
        dispatcher = Dispatcher(
            transport,
            builder,
            headers=config.headers,
            max_inflight=config.max_inflight,
            new_trace_ids=config.new_trace_ids,
            shard=sc.shard[0] if sc.shard[1] > 1 else None,
            on_result=on_each,
            spans=spans,
            lookahead_items=config.lookahead_items,
            lookahead_bytes=config.lookahead_bytes,
            retry=config.retry,
        )
        if config.metrics_listen is not None:
            metrics = ReplayMetrics(dispatcher.stats)
            metrics_url = await stack.enter_async_context(
                serve_metrics(metrics.registry, *config.metrics_listen)
            )
            say(f"metrics on {metrics_url}/metrics")
        if config.scrape and config.out is not None:
            pages, path = resolve(config.scrape, target), scrape_path(config.out)
            await stack.enter_async_context(scraping(pages, path, say))
        stop.callbacks.append(dispatcher.stopping.set)
        stop.now_callbacks.append(dispatcher.stop_now.set)
        stop.in_flight = lambda: dispatcher.stats.in_flight
        outcome = await _dispatch(
            config, the_plan, target, dispatcher, transport, collector, say, miss
        )
        _how_it_ended(outcome, stop, guard, dispatcher.stats, sc, miss)
        if metrics is not None and config.metrics_linger_s > 0 and not outcome.interrupted:
            say(f"serving the final metrics for {config.metrics_linger_s:g} s")
            await asyncio.sleep(config.metrics_linger_s)
        return outcome


def _how_it_ended(
    outcome: ReplayOutcome,
    stop: _Stop,
    guard: FailFast,
    stats: DispatchStats,
    sc: ScheduleConfig,
    miss: MissWatch | None,
) -> None:
    """Interrupted (what was never sent), or stopped by --fail-fast or --slo-stop (why)."""
    outcome.interrupted = stop.is_set
    missed = miss.reason if miss is not None and not stop.is_set else None
    summary = outcome.summary
    if stop.is_set or missed is not None:
        due, sent = stats.due, stats.first_attempts
        mark_unsent(summary, sc, outcome.plan, due, sent, interrupted=stop.is_set)
    if guard.reason is not None:
        outcome.aborted = summary.aborted = guard.reason
    elif missed is not None:
        outcome.aborted = summary.aborted = f"{missed}; stopped (--slo-stop)"
        summary.slo_stop = missed


def _builder(config: ReplayConfig) -> RequestBuilder:
    return RequestBuilder(
        model_map=config.model_map,
        force_lengths=config.force_lengths,
        prompts=PromptMaker(config.schedule.seed),
        edits=config.body_edits,
        replay_aborts=config.replay_aborts,
    )


async def _preflight(
    config: ReplayConfig,
    the_plan: Plan,
    transport: Transport,
    builder: RequestBuilder,
    say: Say,
    stop: _Stop,
) -> None:
    """The first scheduled request, one token, before t0 (``replayer/preflight.py``);
    a stop (Ctrl-C, SIGTERM) ends it at once, not after --timeout."""
    first = next(iter(schedule(config.schedule, the_plan)), None)
    if first is None:
        return
    asked = asyncio.ensure_future(probe(transport, builder, first, config.headers))

    def give_up() -> None:
        asked.cancel()

    stop.callbacks.append(give_up)
    try:
        say(await asked)
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError) and stop.is_set and asked.cancelled():
            return  # stopped: the caller sees it, and closes the transport
        await transport.close()
        raise
    finally:
        stop.callbacks.remove(give_up)


# When a replay starts: its t0 on both clocks (now, or the shards' ``--start-at``), and
# the heap frozen before it so a collection cannot stall the dispatch.
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


async def _dispatch(
    config: ReplayConfig,
    the_plan: Plan,
    target: str,
    dispatcher: Dispatcher,
    transport: Transport,
    collector: ResultCollector,
    say: Say,
    miss: MissWatch | None = None,
) -> ReplayOutcome:
    sc = config.schedule
    loop = asyncio.get_running_loop()
    if config.users is not None:
        scheduled = schedule(sc, the_plan, say)
        burst = min(config.users.counts[0], WARM_CONNECTIONS)
    else:
        scheduled, burst = first_burst(schedule(sc, the_plan, say), WARM_CONNECTIONS)
    # Before t0: connections for the first burst, then a collection that can take a while.
    await transport.warm(min(burst, max(config.connections, 1)))
    freeze_heap()
    # On the dispatcher's clock (time.monotonic: uvloop's loop.time() counts whole ms).
    t0, t0_wall = start_times(time.monotonic(), config.start_at_ns, sc.shard, say)
    say(_announcement(config, the_plan, target))
    total, length_s = _extent(config, the_plan)
    ticker = loop.create_task(
        show_progress(status_line(dispatcher, time.monotonic(), total, length_s), say, config.live)
    )
    watch = LoopWatch(t0, dispatcher.sent_all)  # the dispatch's span: where lags come from
    tasks = [ticker, loop.create_task(watch.run())]
    if miss is not None:
        tasks.append(loop.create_task(miss.stop_run(dispatcher.stopping, dispatcher.sent_all)))
    try:
        cut: list[Planned] = []
        if config.users is not None:
            await dispatcher.run_users(
                scheduled,
                t0,
                t0_wall,
                users=config.users,
                think_s=config.think_s,
                limit_s=config.duration_s,
            )
        else:
            items = until(scheduled, config.duration_s, cut)
            await dispatcher.run(items, t0, t0_wall)
        if dispatcher.stopping.is_set():  # Ctrl-C, --fail-fast or --slo-stop
            # An objective already missed: the answers still to come change nothing.
            missed = miss is not None and miss.reason is not None
            await dispatcher.cancel_in_flight(0.0 if missed else STOP_GRACE_S)
    finally:
        gc.unfreeze()
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await transport.close()
    s = dispatcher.stats
    if s.dropped_for_bytes:
        say(
            f"warning: {s.dropped_for_bytes:,} requests dropped because the request bodies "
            f"in flight held {MAX_INFLIGHT_BYTES >> 20} MiB (the target was not taking "
            "them in), not for --max-inflight"
        )
    summary = collector.summary(s.sent, s.dropped)
    if s.input_intended:
        summary.input_tokens_error = s.input_reported / s.input_intended - 1
    summary.prompt_entropy = dispatcher.builder.prompts.entropy.summary()
    lags = np.frombuffer(dispatcher.lags_ns, dtype=np.int64)
    # One dispatch lag in the summary: the percentiles shown are the verdict's own.
    summary.lag_ms = lag_percentiles(lags)
    summary.client = watched_verdict(lags, config.lag_limit_ms, watch, dispatcher.yielded_s)
    # A closed loop cut by --duration has no first unsent item, only fewer sent.
    closed = config.users is not None and config.duration_s is not None
    if cut or (closed and not dispatcher.stopping.is_set() and s.due < the_plan.count):
        _never_sent(summary, config, the_plan, s)
    return ReplayOutcome(summary, the_plan, target)


def _announcement(config: ReplayConfig, the_plan: Plan, target: str) -> str:
    """The line that says the schedule has started: how much, how fast, where."""
    sc = config.schedule
    which = f"shard {sc.shard[0]}/{sc.shard[1]} of " if sc.shard[1] > 1 else ""
    think = "as recorded" if config.think_s is None else f"{config.think_s:g} s"
    pace = (
        f"{sc.speed}"
        if config.users is None
        else f"closed loop: {config.users} users, think {think}"
    )
    return (
        f"replaying {which}{_what(config, the_plan)} ({pace}, tail "
        f"{the_plan.tail_count:,} x{sc.tail_stretch:g}) at {redact_url(target)}"
    )


def _extent(config: ReplayConfig, the_plan: Plan) -> tuple[int | None, float | None]:
    """The requests an open-loop schedule makes due (this shard's share of them, about)
    and its length in replay seconds; (None, None) for a closed loop."""
    sc = config.schedule
    if config.users is not None:
        return None, None
    total = round(the_plan.to_send * sc.amplify / sc.shard[1])
    length = sc.speed.replay_offset(the_plan.span_s, the_plan.span_s)
    if config.duration_s is not None:
        length = min(length, config.duration_s)
    return total, length


def _what(config: ReplayConfig, the_plan: Plan) -> str:
    """What will be sent: the records due within ``--duration``, times ``--amplify``."""
    sc = config.schedule
    sent = the_plan.to_send
    about = "about " if sc.amplify % 1 or (sent < the_plan.count and the_plan.spread_ns) else ""
    out = f"{about}{round(sent * sc.amplify):,} requests"
    if sc.amplify != 1:
        out += f" ({sent:,} records x{sc.amplify:g})"
    if sent < the_plan.count:
        out += f" of {the_plan.count:,} (--duration {config.duration_s:g}s)"
    return out


def _never_sent(
    summary: ReplaySummary, config: ReplayConfig, the_plan: Plan, s: DispatchStats
) -> None:
    """What ``--duration`` left unsent."""
    mark_unsent(summary, config.schedule, the_plan, s.due, s.first_attempts)
    summary.interrupted = summary.due = None
    summary.duration_limit_s = config.duration_s
