"""``replay --workers N``: one replay spread over N processes on this machine.

One process sends on time up to a few thousand requests/s before its core is
saturated (docs/benchmarks.md). Beyond that, N processes each replay one shard
(``--shard i/N`` by trace id, so none overlap) from one shared start time, exactly
as N machines would (docs/replay.md), and the parent merges their result archives
into ``--out`` and summarises the whole. Each worker plans over the whole archive,
so the tail threshold and the schedule are the same as a single process's.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import multiprocessing
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tailreplay import eventloop
from tailreplay.errors import NotMeasured, TailreplayError, UsageError
from tailreplay.replayer.builtin import builtin_started
from tailreplay.replayer.config import ReplayConfig
from tailreplay.replayer.replay_summary import ReplaySummary
from tailreplay.replayer.run import ReplayOutcome, run
from tailreplay.replayer.schedule import Plan, plan
from tailreplay.replayer.summary import ResultCollector, mark_unsent
from tailreplay.traces.archive.ops import copy_records
from tailreplay.traces.archive.reader import ArchiveReader, read_header
from tailreplay.traces.archive.replay_header import ReplayHeader
from tailreplay.traces.results.client_health import ClientVerdict, client_verdict

__all__ = ["run_workers"]

STARTUP_S = 1.0
"""Lead before the common start, per worker (at least 3 s): each imports, reads and
plans in it, and on a small machine they take turns at the cores."""


def _worker_main(config: ReplayConfig, index: int, count: int, conn: Any) -> None:
    def say(line: str) -> None:
        print(f"[worker {index}/{count}] {line}", file=sys.stderr, flush=True)

    # A process group of its own: a terminal's Ctrl-C reaches the parent alone, which
    # passes every SIGINT and SIGTERM it gets on to each worker, once (a second one is
    # a second Ctrl-C: stop now). The worker's own handler (inside run) then stops its
    # dispatch cleanly and writes its results.
    os.setpgrp()
    _stop_with_the_parent()
    try:
        outcome = eventloop.run(run(config, say), config.event_loop)
        _tell(conn, (outcome.summary, outcome.plan, outcome.interrupted, None))
    except TailreplayError as exc:  # the parent raises it again: same line, same exit code
        _tell(conn, (None, None, False, exc))
    except Exception as exc:
        _tell(conn, (None, None, False, NotMeasured(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def _tell(conn: Any, message: tuple[Any, ...]) -> None:
    """Send the parent the worker's outcome; a parent that died meanwhile hears nothing
    (the worker's results are in its part file), and the worker ends without a
    traceback."""
    with contextlib.suppress(OSError):  # BrokenPipeError, ConnectionResetError
        conn.send(message)


_PR_SET_PDEATHSIG = 1


def _stop_with_the_parent() -> None:
    """SIGTERM to this worker when the parent dies (Linux): out of the parent's process
    group, a worker would otherwise outlive a parent killed with its group."""
    parent = multiprocessing.parent_process()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if parent is not None and os.getppid() != parent.pid:  # it died before the call
        os.kill(os.getpid(), signal.SIGTERM)


def run_workers(config: ReplayConfig, workers: int, say: Callable[[str], None]) -> ReplayOutcome:
    """Replay ``config`` with ``workers`` processes; the merged results go to config.out."""
    if config.schedule.shard != (0, 1):
        raise UsageError("--workers splits the archive itself; run --shard i/N without it")
    if config.metrics_listen is not None:
        raise UsageError("--metrics-listen serves one process's metrics; not with --workers")
    if config.dry_run:
        raise UsageError("--dry-run needs no workers: it sends nothing")
    if config.out is None:
        raise UsageError("--workers needs --out")
    parts = config.out.parent / f".{config.out.name}.parts"
    if parts.exists() and any(parts.iterdir()):
        raise UsageError(
            f"{parts}/ holds the results of an earlier run whose merge failed; merge them "
            f"(`tailreplay traces merge {parts}/part-*.msgpack -o ...`) or remove the folder"
        )
    # One plan before any worker starts: the workers read no more of each file than it
    # held, so a capture still being written gives every shard the same records.
    the_plan = plan(config.schedule)
    config = replace(config, schedule=replace(config.schedule, per_file=the_plan.per_file))
    with _target(config, the_plan, say) as target:
        lead_s = max(3.0, STARTUP_S * workers)
        start_ns = config.start_at_ns or time.time_ns() + round(lead_s * 1e9)
        parts.mkdir(mode=0o700, exist_ok=True)
        try:
            results = _run_all(config, target, start_ns, workers, parts, say)
        except BaseException:  # a worker refused or failed: nothing whole to keep
            shutil.rmtree(parts, ignore_errors=True)
            raise
        try:
            outcome = _merge(config, results, parts, workers, target, the_plan)
        except Exception:
            # A full disk or a vanished directory must not take the results with it.
            say(f"warning: merging failed; each worker's results are kept in {parts}/")
            raise
        shutil.rmtree(parts, ignore_errors=True)
        return outcome


@contextlib.contextmanager
def _target(config: ReplayConfig, the_plan: Plan, say: Callable[[str], None]) -> Iterator[str]:
    """The target URL: the configured one, or one simulator all workers share."""
    if config.target is not None:
        yield config.target
        return
    if config.builtin_target is None:
        raise UsageError("no --target, and no built-in simulator to replay against")
    # Sized for the longest request: the workers plan the same set, after it starts.
    with builtin_started(config.builtin_target, the_plan, say) as url:
        yield url


def _run_all(
    config: ReplayConfig,
    target: str,
    start_ns: int,
    workers: int,
    parts: Path,
    say: Callable[[str], None],
) -> list[tuple[ReplaySummary, Plan, bool]]:
    ctx = multiprocessing.get_context("spawn")
    procs, pipes = [], []
    for i in range(workers):
        worker_config = replace(
            config,
            schedule=replace(config.schedule, shard=(i, workers)),
            target=target,
            start_at_ns=start_ns,
            out=parts / f"part-{i}.msgpack",
            live=False,
        )
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_worker_main,
            args=(worker_config, i, workers, writer),
            name=f"tailreplay-replay-{i}",
        )
        proc.start()
        writer.close()
        procs.append(proc)
        pipes.append(reader)
    say(f"{workers} workers, one shard each, starting together")
    interrupted = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal interrupted
        interrupted = True
        for proc in procs:  # each stops cleanly, its results written, then the merge
            if proc.pid is not None and proc.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        results = []
        for i, (proc, pipe) in enumerate(zip(procs, pipes, strict=True)):
            try:
                summary, worker_plan, stopped, error = pipe.recv()
            except EOFError:
                summary, worker_plan, stopped = None, None, False
                error = NotMeasured("exited without a result")
            proc.join()
            if error is not None:
                for other in procs:
                    other.terminate()
                error = copy.copy(error)  # the same class and exit code, the worker named
                error.args = (f"worker {i}/{workers}: {error}",)
                raise error
            results.append((summary, worker_plan, stopped or interrupted))
        return results
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _merge(
    config: ReplayConfig,
    results: list[tuple[ReplaySummary, Plan, bool]],
    parts: Path,
    workers: int,
    target: str,
    whole: Plan,
) -> ReplayOutcome:
    """The workers' parts as one result in ``--out``, and its summary (``whole``: the
    plan of every shard, for what an interrupted run did not send)."""
    assert config.out is not None
    files = sorted(parts.glob("part-*.msgpack"))
    # The parts' common settings; the merge is the whole run, of its workers' parts.
    header = replace(ReplayHeader.read(read_header(files[0])), shard=(0, 1), workers=workers)
    copy_records(files, config.out, source="replay", extra_header=header.to_map())
    the_plan = results[0][1]
    collector = ResultCollector(
        tail_stretch=config.schedule.tail_stretch,
        tail_quantile=config.schedule.tail_quantile,
        tail_by=the_plan.tail_by,
        tail_capped=the_plan.capped,
        context=config.schedule.max_context,
    )
    for record in ArchiveReader([config.out]):
        collector.add(record)
    sent = sum(s.sent for s, _, _ in results)
    dropped = sum(s.dropped for s, _, _ in results)
    summary = collector.summary(sent, dropped)
    weights = [
        (s.input_tokens_error, s.completed)
        for s, _, _ in results
        if s.input_tokens_error is not None
    ]
    if weights and sum(w for _, w in weights):
        summary.input_tokens_error = sum(e * w for e, w in weights) / sum(w for _, w in weights)
    summary.workers = workers
    summary.client = _merged_health(config, collector, [s for s, _, _ in results])
    stopped = any(stopped for _, _, stopped in results)
    if stopped:
        # A worker that finished its shard had every request of it due.
        due = sum(s.due if s.due is not None else s.requests for s, _, _ in results)
        mark_unsent(summary, config.schedule, whole, due, sent)
    return ReplayOutcome(summary, the_plan, target, stopped)


def _merged_health(
    config: ReplayConfig, collector: ResultCollector, summaries: list[ReplaySummary]
) -> ClientVerdict:
    """One verdict for all workers: the lag P99 over every send; the loop stalls summed,
    the worst stall, the busiest worker's CPU and the longest wait for one, the steal."""
    lags = np.frombuffer(collector.dispatch_lag_ns, dtype=np.int64)
    verdict = client_verdict(lags, config.lag_limit_ms)
    health = [s.client for s in summaries if s.client is not None]
    if health:
        verdict["loop_stalls"] = sum(h["loop_stalls"] or 0 for h in health)
        verdict["worst_stall_ms"] = max(h["worst_stall_ms"] or 0.0 for h in health)
        # None where no worker could read it (a worker stopped before t0)
        verdict["cpu_share"] = _most([h["cpu_share"] for h in health])
        verdict["cpu_busy_share"] = _most([h["cpu_busy_share"] for h in health])
        verdict["cpu_wait_share"] = _most([h["cpu_wait_share"] for h in health])
        verdict["steal_share"] = _most([h["steal_share"] for h in health])
    return verdict


def _most(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None
