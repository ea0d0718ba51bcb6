"""The open-loop dispatcher, driven through a fake transport: no sockets, real loop time.

``Dispatcher.run(items, t0, t0_wall_ns)`` sends each planned request at ``t0 + due_s``
on the loop's clock, whatever the target does, and hands ``on_result`` one result
record per request that came due: answered, failed, dropped at ``max_inflight``
(after ``drop_after_s``) or cancelled after a stop. ``FakeTransport`` stands in for
``HttpTransport``: it notes what it was sent and when, answers with a chosen
``Outcome``, and can hold a request open on an ``asyncio.Event``, stall the loop
or raise.

Timing asserts what the code controls — exact arithmetic, order, never early —
and any upper bound on lag is generous (hundreds of ms): the machine is shared.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tailreplay.replayer.dispatch import Burst, Dispatcher
from tailreplay.replayer.prompts import PromptMaker
from tailreplay.replayer.request import RequestBuilder, RequestSpec
from tailreplay.replayer.schedule import Planned
from tailreplay.replayer.transport import Outcome
from tailreplay.replayer.users import Users
from tailreplay.traces.archive.record import Record

CHAT = "/v1/chat/completions"
RECORDED_START_NS = 1_700_000_000 * 10**9
OK = Outcome(status=200, ttfb_ns=2_000_000, duration_ns=9_000_000, bytes_out=456,
             completion_tokens=16, finish_reason="length")  # fmt: skip
REFUSAL = '{"error": {"message": "Unrecognized request argument supplied: min_tokens"}}'
WAIT_S = 5.0
"""How long a test waits for something that should happen in milliseconds."""


def planned(i: int, due_s: float, *, traced: bool = True, budget: int = 16) -> Planned:
    """Request ``i`` of a hand-made trace (with a recorded trace id unless not ``traced``)."""
    record = Record(
        start_ns=RECORDED_START_NS + round(due_s * 1e9),
        trace_id=(0xA000 + i).to_bytes(16, "big") if traced else None,
        span_id=(0xB000 + i).to_bytes(8, "big"),
        method="POST",
        path=CHAT,
        model="llama",
        stream=i % 2 == 0,
        input_tokens=40 + i,
        output_tokens=budget,
    )
    return Planned(due_s, record, copy=0, tail=i % 3 == 0, budget=budget)


@dataclass
class Call:
    """One ``send`` as the fake saw it."""

    at: float
    """``time.monotonic()`` on arrival (the dispatcher's clock)."""
    spec: RequestSpec
    headers: dict[str, str]
    cancelled: bool = False

    @property
    def body(self) -> dict[str, Any]:
        assert self.spec.body is not None
        parsed: dict[str, Any] = json.loads(self.spec.body)
        return parsed

    @property
    def ids(self) -> tuple[bytes, bytes]:
        """(trace id, span id) from the traceparent header."""
        version, trace, span, flags = self.headers["traceparent"].split("-")
        assert (version, flags) == ("00", "01")
        return bytes.fromhex(trace), bytes.fromhex(span)


class FakeTransport:
    """A ``Transport`` that records each send and answers ``answers[i]`` to the i-th
    (the last answer repeats). ``hold`` (one Event for all, or {call index: Event})
    keeps requests open until set; ``stall_first_s`` blocks the whole loop during
    the first send (a GC pause, a busy machine); ``raises`` is raised instead of
    answering."""

    def __init__(
        self,
        *answers: Outcome,
        hold: asyncio.Event | dict[int, asyncio.Event] | None = None,
        stall_first_s: float = 0.0,
        raises: Exception | None = None,
    ) -> None:
        self.answers = list(answers) or [OK]
        self.hold = hold
        self.stall_first_s = stall_first_s
        self.raises = raises
        self.calls: list[Call] = []
        self.closed = False

    async def send(
        self, spec: RequestSpec, headers: Mapping[str, str], traceparent: str | None = None
    ) -> Outcome:
        call = Call(time.monotonic(), spec, {**headers, "traceparent": traceparent or ""})
        index = len(self.calls)
        self.calls.append(call)
        if index == 0 and self.stall_first_s:
            time.sleep(self.stall_first_s)  # blocks the loop: nothing else runs meanwhile
        gate = self.hold.get(index) if isinstance(self.hold, dict) else self.hold
        try:
            if gate is not None:
                await gate.wait()
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        if self.raises is not None:
            raise self.raises
        return self.answers[min(index, len(self.answers) - 1)]

    async def close(self) -> None:
        self.closed = True


@dataclass
class SpanSink:
    """A ``SpanSink``: keeps every (result, request body) it is given."""

    capture_content: bool
    emitted: list[tuple[Record, bytes | None]] = field(default_factory=list)

    def emit(self, record: Record, *, request_body: bytes | None = None) -> None:
        self.emitted.append((record, request_body))


class Harness:
    """A dispatcher over ``transport`` with a fresh builder; results kept in arrival order."""

    def __init__(self, transport: FakeTransport, **options: Any) -> None:
        self.transport = transport
        self.builder = RequestBuilder(
            model_map={}, force_lengths=True, prompts=PromptMaker(0), edits=None
        )
        self.results: list[Record] = []
        self.result_times: list[float] = []
        options.setdefault("max_inflight", 64)
        self.headers = {"Authorization": "Bearer replay"}
        self.dispatcher = Dispatcher(
            transport, self.builder, headers=self.headers, on_result=self._on_result, **options
        )
        self.t0 = 0.0
        self.t0_wall_ns = 0

    def _on_result(self, record: Record) -> None:
        self.results.append(record)
        self.result_times.append(time.monotonic())

    def start(self, items: list[Planned]) -> asyncio.Task[None]:
        """Start the replay now: ``t0`` is this instant, on both clocks (the dispatcher's is
        ``time.monotonic``)."""
        self.t0, self.t0_wall_ns = time.monotonic(), time.time_ns()
        return asyncio.create_task(self.dispatcher.run(iter(items), self.t0, self.t0_wall_ns))

    async def replay(self, items: list[Planned]) -> list[Record]:
        await asyncio.wait_for(self.start(items), WAIT_S)
        return self.results

    def result(self, item: Planned) -> Record:
        (found,) = [r for r in self.results if r.orig_span_id == item.record.span_id]
        return found


async def until(condition: Callable[[], bool]) -> None:
    """Poll until ``condition()`` holds (fails after WAIT_S)."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.001)


# --- 1. Scheduling arithmetic ------------------------------------------------------------


async def test_each_request_leaves_at_its_due_time_never_early() -> None:
    dues = [0.0, 0.0, 0.003, 0.01, 0.01, 0.011, 0.02, 0.05, 0.0501, 0.08, 0.12]  # with ties
    items = [planned(i, d) for i, d in enumerate(dues)]
    h = Harness(FakeTransport())
    await h.replay(items)

    stats = h.dispatcher.stats
    assert (stats.due, stats.sent, stats.completed, stats.errors) == (11, 11, 11, 0)
    assert (stats.dropped, stats.in_flight) == (0, 0)
    # Sent in due order (ties in the order given), one send each.
    assert [c.ids[0] for c in h.transport.calls] == [it.record.trace_id for it in items]
    for item, call in zip(items, h.transport.calls, strict=True):
        r = h.result(item)
        due = h.t0 + item.due_s
        assert r.intended_ns == h.t0_wall_ns + round(item.due_s * 1e9)  # exact
        assert call.at >= due  # never early
        # lag = sent - due, measured just before the send (so a hair before it arrived).
        arrived_lag_ns = (call.at - due) * 1e9
        assert 0 <= r.lag_ns <= arrived_lag_ns + 1
        assert arrived_lag_ns - r.lag_ns < 0.2e9
        # sent_ns is the wall clock at the send: intended + lag, up to clock skew.
        assert r.start_ns == r.sent_ns
        assert abs(r.sent_ns - r.intended_ns - r.lag_ns) < 0.2e9
    assert list(h.dispatcher.lags_ns) == [h.result(it).lag_ns for it in items]


async def test_lag_is_measured_from_the_absolute_start_so_a_stall_is_caught_up() -> None:
    # 300 requests 2 ms apart; the first send blocks the loop for half a second.
    # Due times are t0 + due_s, so once the loop runs again the overdue requests
    # go at once and the later ones are back on time. A chain of relative sleeps
    # would carry the stall forward: every later request >= 0.5 s late.
    items = [planned(i, i * 0.002) for i in range(300)]
    h = Harness(FakeTransport(stall_first_s=0.5))
    await h.replay(items)

    lags = [h.result(it).lag_ns for it in items]
    assert all(lag >= 0 for lag in lags)
    assert lags[1] >= 0.49e9  # due 2 ms in, sent after the stall
    assert max(lags[-20:]) < 0.25e9  # due 0.56-0.6 s: back on schedule
    calls = h.transport.calls
    assert [c.ids[0] for c in calls] == [it.record.trace_id for it in items]
    assert all(c.at >= h.t0 + it.due_s for c, it in zip(calls, items, strict=True))


def test_a_burst_holds_the_yield_only_while_the_next_request_is_due_already() -> None:
    b = Burst(3, 0.0002)
    assert not b.hold(1.0005, 1.0)  # the next is not due yet: yield, so this one sends now
    assert not b.hold(None, 1.0)  # none left
    # Behind schedule: three started, then a yield, and again.
    assert [b.hold(0.5, 1.0) for _ in range(8)] == [True, True, True, False] * 2
    assert b.hold(1.0, 1.0)  # a tie is due already
    assert not b.hold(1.1, 1.0)  # the tie ends: yield, and start afresh
    assert b.held == 0


def test_a_burst_ends_after_its_time_whatever_its_count() -> None:
    b = Burst(8, 0.0002)
    assert b.hold(0.5, 1.0)
    assert b.hold(0.5, 1.0001)
    assert not b.hold(0.5, 1.0003)  # 0.3 ms since the first held: the tasks made go now
    assert b.hold(0.5, 1.0004)


async def test_behind_schedule_every_request_still_goes_in_due_order() -> None:
    # 200 requests due at once (a tie, or a backlog): started in bursts, sent in order.
    items = [planned(i, 0.0) for i in range(200)]
    h = Harness(FakeTransport(), max_inflight=256)
    await h.replay(items)
    assert [c.ids[0] for c in h.transport.calls] == [it.record.trace_id for it in items]
    assert h.dispatcher.stats.sent == 200


# --- 2. max_inflight: wait up to drop_after_s, then drop -----------------------------------


async def test_at_max_inflight_requests_are_dropped_after_drop_after_s() -> None:
    release = asyncio.Event()
    h = Harness(FakeTransport(hold=release), max_inflight=2, drop_after_s=0.05, shard=1)
    items = [planned(i, 0.0) for i in range(5)]
    run = h.start(items)
    await until(lambda: h.dispatcher.stats.dropped == 3)

    stats = h.dispatcher.stats
    assert (stats.due, stats.sent, stats.dropped, stats.in_flight) == (5, 2, 3, 2)
    assert len(h.transport.calls) == 2
    assert len(h.results) == 3  # only the drops so far: the two sent are still open
    # The first drop comes no sooner than drop_after_s after the due time; the next two
    # were due just as long ago, so they do not wait again.
    assert h.result_times[0] >= h.t0 + 0.05
    for item in items[2:]:
        r = h.result(item)
        assert r.error == "dropped"
        assert r.status == 0
        assert (r.trace_id, r.span_id, r.sent_ns, r.lag_ns) == (None, None, None, None)
        assert r.intended_ns == r.start_ns == h.t0_wall_ns
        assert (r.orig_trace_id, r.shard) == (item.record.trace_id, 1)
        assert r.duration_ns is None and r.bytes_in is None  # nothing was sent
        assert r.max_tokens == item.budget

    release.set()  # the held requests complete normally
    await asyncio.wait_for(run, WAIT_S)
    for item in items[:2]:
        r = h.result(item)
        assert (r.status, r.error, r.shard) == (200, None, 1)
        assert r.trace_id == item.record.trace_id
    assert (stats.sent, stats.completed, stats.errors, stats.dropped) == (2, 2, 0, 3)
    assert stats.in_flight == 0


async def test_request_bodies_in_flight_are_bounded_in_bytes() -> None:
    """Prompts of 8,000 tokens (~56 KB each) under a 150 KB bound: two in flight, the
    third waits for a slot and is dropped; a body alone past the bound still goes."""
    release = asyncio.Event()
    h = Harness(FakeTransport(hold=release), drop_after_s=0.05, max_inflight_bytes=150_000)
    items = [planned(i, 0.0) for i in range(3)]
    for item in items:
        item.record.input_tokens = 8_000
    run = h.start(items)
    await until(lambda: h.dispatcher.stats.dropped == 1)
    sizes = [len(call.spec.body or b"") for call in h.transport.calls]
    assert len(sizes) == 2 and all(40_000 < size < 75_000 for size in sizes), sizes
    assert h.result(items[2]).error == "dropped"
    assert h.dispatcher.stats.dropped_for_bytes == 1
    release.set()
    await asyncio.wait_for(run, WAIT_S)
    assert h.dispatcher.stats.in_flight == 0

    alone = Harness(FakeTransport(), max_inflight_bytes=100)
    (result,) = await alone.replay([planned(9, 0.0)])
    assert result.error is None and result.bytes_in is not None and result.bytes_in > 100


async def test_closed_loop_users_wait_for_bytes_in_flight_rather_than_drop() -> None:
    """Three users, prompts of ~56 KB, a 150 KB bound: two requests in flight at most;
    the third user's waits for one to finish, then goes (a closed loop drops nothing)."""
    release = asyncio.Event()
    h = Harness(FakeTransport(hold=release), max_inflight_bytes=150_000)
    items = [planned(i, 0.0) for i in range(3)]
    for item in items:
        item.record.input_tokens = 8_000
        item.record.session = f"s{item.record.start_ns}-{id(item)}"
    h.t0, h.t0_wall_ns = time.monotonic(), time.time_ns()
    run = asyncio.create_task(
        h.dispatcher.run_users(
            iter(items), h.t0, h.t0_wall_ns, users=Users((3,)), think_s=0.0, limit_s=WAIT_S
        )
    )
    await until(lambda: len(h.transport.calls) == 2)
    await asyncio.sleep(0.1)
    assert len(h.transport.calls) == 2 and h.dispatcher.stats.dropped == 0
    release.set()
    await asyncio.wait_for(run, WAIT_S)
    assert len(h.transport.calls) == 3 and [r.error for r in h.results] == [None] * 3


async def test_a_slot_freed_before_drop_after_s_lets_the_waiting_request_go() -> None:
    first_done = asyncio.Event()
    h = Harness(FakeTransport(hold={0: first_done}), max_inflight=1, drop_after_s=WAIT_S)
    items = [planned(0, 0.0), planned(1, 0.0)]
    run = h.start(items)
    await until(lambda: len(h.transport.calls) == 1)
    await asyncio.sleep(0.05)
    assert len(h.transport.calls) == 1  # the second waits for the slot
    freed_at = time.monotonic()
    first_done.set()
    await asyncio.wait_for(run, WAIT_S)

    stats = h.dispatcher.stats
    assert (stats.due, stats.sent, stats.dropped, stats.completed) == (2, 2, 0, 2)
    second = h.result(items[1])
    assert (second.status, second.error) == (200, None)
    assert h.transport.calls[1].at >= freed_at
    assert second.lag_ns >= 0.05e9  # the wait for a slot counts as lag (from the due time)


# --- 3. Stopping and cancelling ------------------------------------------------------------


async def test_a_stop_ends_dispatching_requests_not_yet_due() -> None:
    items = [planned(i, 0.0) for i in range(3)] + [planned(i, 30.0) for i in range(3, 6)]
    h = Harness(FakeTransport())
    run = h.start(items)
    await until(lambda: len(h.results) == 3)
    h.dispatcher.stopping.set()
    await asyncio.wait_for(run, WAIT_S)  # seen within a quarter second, not 30 s

    stats = h.dispatcher.stats
    assert (stats.due, stats.sent, stats.completed, stats.in_flight) == (3, 3, 3, 0)
    assert len(h.transport.calls) == 3
    assert {r.orig_trace_id for r in h.results} == {it.record.trace_id for it in items[:3]}


async def test_cancel_in_flight_waits_the_grace_then_cancels_the_rest() -> None:
    quick, never = asyncio.Event(), asyncio.Event()
    h = Harness(FakeTransport(hold={0: quick, 1: never}))
    items = [planned(0, 0.0), planned(1, 0.0), planned(2, 30.0)]
    run = h.start(items)
    await until(lambda: len(h.transport.calls) == 2)
    h.dispatcher.stopping.set()
    loop = asyncio.get_running_loop()
    began = loop.time()
    quick.set()  # the first finishes within the grace; the second never would
    await h.dispatcher.cancel_in_flight(0.3)
    assert loop.time() - began >= 0.3  # the full grace was given
    await asyncio.wait_for(run, WAIT_S)

    finished, cancelled = h.result(items[0]), h.result(items[1])
    assert (finished.status, finished.error) == (200, None)
    assert (cancelled.status, cancelled.error) == (0, "cancelled")
    assert cancelled.trace_id == items[1].record.trace_id  # it was sent
    assert cancelled.sent_ns is not None and cancelled.lag_ns is not None
    assert [c.cancelled for c in h.transport.calls] == [False, True]
    stats = h.dispatcher.stats
    assert (stats.due, stats.sent, stats.completed, stats.errors) == (2, 2, 2, 1)
    assert (stats.in_flight, len(h.results)) == (0, 2)  # nothing for the one never due


async def test_after_a_stop_run_returns_so_that_the_grace_applies() -> None:
    never = asyncio.Event()
    h = Harness(FakeTransport(hold=never))
    run = h.start([planned(0, 0.0), planned(1, 30.0)])
    await until(lambda: len(h.transport.calls) == 1)
    h.dispatcher.stopping.set()
    try:
        done, _ = await asyncio.wait({run}, timeout=1.0)
        assert run in done, "run() is still waiting for the request held open"
    finally:
        await h.dispatcher.cancel_in_flight(0)
        await asyncio.wait_for(run, WAIT_S)


# --- 4. Results, trace context, shards, spans ----------------------------------------------


@pytest.mark.parametrize(
    ("answer", "status", "error", "errors"),
    [
        (OK, 200, None, 0),
        (Outcome(status=500, error_text="overloaded"), 500, "http_500", 1),
        (Outcome(status=429), 429, "http_429", 1),
        (Outcome(error="timeout"), 0, "timeout", 1),
    ],
)
async def test_the_result_records_what_the_target_answered(
    answer: Outcome, status: int, error: str | None, errors: int
) -> None:
    item = planned(0, 0.0)
    h = Harness(FakeTransport(answer))
    (r,) = await h.replay([item])

    assert (r.status, r.error) == (status, error)
    assert (h.dispatcher.stats.completed, h.dispatcher.stats.errors) == (1, errors)
    assert (r.duration_ns, r.ttfb_ns, r.bytes_out) == (
        answer.duration_ns, answer.ttfb_ns, answer.bytes_out)  # fmt: skip
    assert r.output_tokens == answer.completion_tokens
    assert r.bytes_in == len(h.transport.calls[0].spec.body or b"")
    assert (r.method, r.path, r.model, r.stream) == ("POST", CHAT, "llama", True)
    assert (r.max_tokens, r.tail, r.shard) == (16, True, None)
    assert (r.orig_trace_id, r.orig_span_id) == (item.record.trace_id, item.record.span_id)


async def test_traceparent_continues_the_recorded_trace_in_a_new_span() -> None:
    items = [planned(0, 0.0), planned(1, 0.0, traced=False)]
    h = Harness(FakeTransport())
    await h.replay(items)

    kept, fresh = h.transport.calls
    assert kept.ids == (items[0].record.trace_id, h.result(items[0]).span_id)
    assert kept.ids[1] != items[0].record.span_id
    assert fresh.ids == (h.result(items[1]).trace_id, h.result(items[1]).span_id)
    assert len(fresh.ids[0]) == 16 and any(fresh.ids[0])  # a new trace for one without
    assert h.result(items[1]).orig_trace_id is None
    assert kept.headers["Authorization"] == "Bearer replay"
    assert h.headers == {"Authorization": "Bearer replay"}  # the shared headers untouched


async def test_new_trace_ids_starts_a_new_trace_for_every_request() -> None:
    items = [planned(i, 0.0) for i in range(3)]
    h = Harness(FakeTransport(), new_trace_ids=True)
    await h.replay(items)

    sent = [c.ids[0] for c in h.transport.calls]
    assert len(set(sent)) == 3
    assert not set(sent) & {it.record.trace_id for it in items}
    for item, call in zip(items, h.transport.calls, strict=True):
        r = h.result(item)
        assert call.ids == (r.trace_id, r.span_id)
        assert r.orig_trace_id == item.record.trace_id


@pytest.mark.parametrize("shard", [None, 0, 3])
async def test_shard_is_set_on_every_result(shard: int | None) -> None:
    h = Harness(FakeTransport(), shard=shard)
    results = await h.replay([planned(i, 0.001 * i) for i in range(4)])
    assert [r.shard for r in results] == [shard] * 4


@pytest.mark.parametrize("capture_content", [False, True])
async def test_the_span_sink_gets_each_sent_request_but_not_the_dropped(
    capture_content: bool,
) -> None:
    spans = SpanSink(capture_content)
    release = asyncio.Event()
    h = Harness(FakeTransport(hold={0: release}), max_inflight=1, drop_after_s=0.02, spans=spans)
    items = [planned(0, 0.0), planned(1, 0.0), planned(2, 0.1)]
    run = h.start(items)
    await until(lambda: h.dispatcher.stats.dropped == 1)
    release.set()
    await asyncio.wait_for(run, WAIT_S)

    assert [r.error for r in h.results] == ["dropped", None, None]
    sent = [h.result(items[0]), h.result(items[2])]
    assert [record for record, _ in spans.emitted] == sent  # the very records on_result got
    bodies = [call.spec.body for call in h.transport.calls]
    expected = bodies if capture_content else [None, None]
    assert [body for _, body in spans.emitted] == expected


# --- Transport failures --------------------------------------------------------------------


async def test_a_transport_that_raises_fails_the_request_not_the_run() -> None:
    h = Harness(FakeTransport(raises=RuntimeError("bug in a transport")))
    results = await h.replay([planned(0, 0.0), planned(1, 0.01)])
    assert len(results) == 2
    assert all(r.error is not None and r.status == 0 for r in results)
    stats = h.dispatcher.stats
    assert (stats.sent, stats.completed, stats.errors, stats.in_flight) == (2, 2, 2, 0)


async def test_a_transport_exception_is_not_reported_as_cancelled() -> None:
    h = Harness(FakeTransport(raises=RuntimeError("bug in a transport")))
    (r,) = await h.replay([planned(0, 0.0)])
    assert (r.error, r.status) == ("RuntimeError", 0)  # a failed request, not a stop


# --- 5. The target refuses min_tokens/ignore_eos: send once more without them -------------


@pytest.mark.parametrize("status", [400, 422])
async def test_a_refusal_of_the_forced_fields_is_retried_without_them(status: int) -> None:
    refused = Outcome(status=status, error_text=REFUSAL)
    h = Harness(FakeTransport(refused, OK))
    items = [planned(0, 0.0, budget=16), planned(1, 0.05, budget=24)]
    await h.replay(items)

    first, again, later = h.transport.calls
    assert (first.body["min_tokens"], first.body["ignore_eos"]) == (16, True)
    assert "min_tokens" not in again.body and "ignore_eos" not in again.body
    assert again.body["max_tokens"] == 16
    assert again.body["messages"] == first.body["messages"]
    assert again.headers["traceparent"] == first.headers["traceparent"]  # the same span
    assert (h.result(items[0]).status, h.result(items[0]).error) == (200, None)
    # Built after the refusal: sent once, without the fields.
    assert "min_tokens" not in later.body and later.body["max_tokens"] == 24
    assert h.builder.forced_fields_ok is False
    stats = h.dispatcher.stats
    assert (stats.sent, stats.completed, stats.errors) == (2, 2, 0)  # requests, not sends


async def test_another_400_is_not_retried() -> None:
    h = Harness(FakeTransport(Outcome(status=400, error_text="context length exceeded")))
    (r,) = await h.replay([planned(0, 0.0)])
    assert len(h.transport.calls) == 1
    assert (r.status, r.error) == (400, "http_400")
    assert h.builder.forced_fields_ok is True


async def test_after_a_retry_the_result_describes_the_body_that_was_answered() -> None:
    spans = SpanSink(capture_content=True)
    h = Harness(FakeTransport(Outcome(status=400, error_text=REFUSAL), OK), spans=spans)
    (r,) = await h.replay([planned(0, 0.0)])
    answered = h.transport.calls[1].spec.body
    assert answered is not None
    assert spans.emitted[0][1] == answered
    assert r.bytes_in == len(answered)
