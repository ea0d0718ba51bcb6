"""``replay --offline``: the schedule served by the built-in simulator's engine in this
process, on a virtual clock (``BuiltinTarget.serve_offline``), each answer made a
result record as a live run makes it.

The engine runs in a worker thread (the run's own loop keeps Ctrl-C), handing its
answers over in batches through a bounded queue, so memory stays bounded however
long the archive. A result's times are the model's, from the request's due time:
its dispatch lag is 0, it was sent when due, and its trace context is a new span
in the recorded trace (or a new trace), as a live run's.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from tailreplay.dialects import DEFAULT_ROUTE, dialect_for
from tailreplay.http.sse import EXACT_GAPS, bin_of, flat_bins
from tailreplay.openai_api import generates_nothing
from tailreplay.replayer.builtin import Answer, Ask, BuiltinTarget
from tailreplay.replayer.config import ReplayConfig
from tailreplay.replayer.due_times import u64
from tailreplay.replayer.request import prompt_tokens
from tailreplay.replayer.results import Sent, result_record
from tailreplay.replayer.schedule import Plan, Planned, schedule, until
from tailreplay.replayer.transport import Outcome
from tailreplay.tracecontext import TraceContext, new_span_id, new_trace_id
from tailreplay.traces.archive.record import Record

__all__ = ["serve_offline"]

_QUEUED_BATCHES = 8
"""Batches of answers waiting for the run's thread at most: the engine waits beyond."""
_POLL_S = 0.1
"""How often the run looks for a stop (Ctrl-C) while the engine works."""


async def serve_offline(
    config: ReplayConfig,
    builtin: BuiltinTarget,
    the_plan: Plan,
    on_result: Callable[[Record], None],
    stopped: Callable[[], bool],
    say: Callable[[str], None],
) -> int:
    """Serve the schedule by ``builtin``'s engine, each answer's result to ``on_result``;
    how many requests were served. ``stopped`` (Ctrl-C) ends it."""
    t0_ns = time.time_ns()
    batches: queue.Queue[list[tuple[Any, Answer]] | None] = queue.Queue(_QUEUED_BATCHES)
    stop = threading.Event()
    items = until(schedule(config.schedule, the_plan, say), config.duration_s, [])
    worker = asyncio.get_running_loop().run_in_executor(
        None, _work, builtin, the_plan.longest, _asks(items, config.schedule.seed), batches, stop
    )
    served = 0
    try:
        while not stopped():  # looked at every _POLL_S: Ctrl-C ends the run at once
            try:
                batch = await asyncio.to_thread(batches.get, timeout=_POLL_S)
            except queue.Empty:
                continue
            if batch is None:
                break
            for item, answer in batch:
                on_result(_result(item, answer, t0_ns, config.new_trace_ids))
            served += len(batch)
    finally:
        stop.set()  # the engine stops, and hands on nothing more
        await worker
    return served


def _work(
    builtin: BuiltinTarget,
    longest: int | None,
    asks: Iterator[tuple[Planned, Ask]],
    batches: queue.Queue[list[tuple[Any, Answer]] | None],
    stop: threading.Event,
) -> None:
    def emit(batch: list[tuple[Any, Answer]] | None) -> None:
        while not stop.is_set():  # a stopping run takes no more
            try:
                batches.put(batch, timeout=0.1)
                return
            except queue.Full:
                continue

    try:
        builtin.serve_offline(longest, asks, emit, stop)
    finally:
        emit(None)  # the end


def _asks(items: Iterator[Planned], seed: int) -> Iterator[tuple[Planned, Ask]]:
    """Each planned request as the engine takes it: its prompt and output lengths as
    the live run would ask for them, its recorded prefix blocks, its own salt. A call
    that generates nothing asks for no output (answered at once); an embedding for one
    token (its one step is the prefill's), as the simulator's server asks."""
    for item in items:
        record = item.record
        prompt = prompt_tokens(record)
        output = item.budget if item.budget is not None else record.output_tokens
        if generates_nothing(record.method, record.path):
            output = 0
        elif not _generates(record):
            output = 1
        elif output is not None:
            output = max(output, 1)
        own = u64(item.key, item.copy.to_bytes(4, "big"), seed.to_bytes(8, "big", signed=True))
        yield item, (item.due_s, prompt, output, list(record.prefix_hashes or ()), own)


def _result(item: Planned, answer: Answer, t0_ns: int, new_trace_ids: bool) -> Record:
    intended_ns = t0_ns + round(item.due_s * 1e9)
    trace_id = item.record.trace_id if item.record.trace_id and not new_trace_ids else None
    ctx = TraceContext(trace_id or new_trace_id(), new_span_id())
    sent = Sent(intended_ns, 0, ctx)
    return result_record(item, intended_ns, shard=None, outcome=_outcome(item, answer), sent=sent)


def _outcome(item: Planned, answer: Answer) -> Outcome:
    """What a client would have measured of ``answer``: a stream's first token and its
    gaps (tokens of one step in one read: gaps of 0), a whole answer at its end."""
    status, token_s, cached, error_text = answer
    record = item.record
    if status != 200 or not token_s:
        return Outcome(status=status, duration_ns=0, error_text=error_text)
    ns = [round(t * 1e9) for t in token_s]
    generates = _generates(record)
    out = Outcome(
        status=200,
        duration_ns=ns[-1],
        prompt_tokens=prompt_tokens(record),
        completion_tokens=len(ns) if generates else 0,
        cached_tokens=cached,
        tokens_source="usage",
        finish_reason="length" if generates else None,
        content_type="text/event-stream" if record.stream else "application/json",
    )
    if record.stream:
        gaps = [(b - a) // 1000 for a, b in itertools.pairwise(ns)]
        out.ttfb_ns, out.gaps_us = ns[0], gaps[:EXACT_GAPS]
        out.gaps_more = _binned(gaps[EXACT_GAPS:])
    else:
        out.ttfb_ns = ns[-1]
    return out


def _generates(record: Record) -> bool:
    """Whether its answer carries output tokens (an embedding's does not)."""
    dialect = dialect_for(record.path or DEFAULT_ROUTE)
    return dialect is None or dialect.generates


def _binned(gaps: list[int]) -> list[int] | None:
    """Gaps past the first ``EXACT_GAPS``, counted by bin as a live stream's are."""
    more: dict[int, int] = {}
    for gap in gaps:
        key = bin_of(gap) if gap > 0 else -1
        more[key] = more.get(key, 0) + 1
    return flat_bins(more)
