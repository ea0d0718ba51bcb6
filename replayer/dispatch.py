"""The dispatcher: open loop (each request leaves when it is due, whatever the target
does) or closed loop (``run_users``: N users, each waiting for its answer).

Request i is due at ``t0 + due_i`` on the monotonic clock; the dispatcher
sleeps until that absolute instant (never a chain of relative sleeps, so error
does not add up) and starts the request as its own task, so a slow target
delays nothing else. In-flight requests are bounded: a request that finds no
free slot within ``drop_after_s`` of its due time is recorded as dropped —
counted, never silently sent late. Latency is kept from the due time (what a
user would have felt: free of coordinated omission) and from the send. While it
waits, the dispatcher builds the requests after the next one (``lookahead.py``),
so a long synthetic prompt is ready before it is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from time import monotonic as clock
from time import monotonic_ns
from typing import Any, Protocol

from tailreplay.replayer.lookahead import LOOKAHEAD_BYTES, LOOKAHEAD_ITEMS, Lookahead
from tailreplay.replayer.request import RequestBuilder, RequestSpec, prompt_tokens
from tailreplay.replayer.results import Sent, result_record
from tailreplay.replayer.retry import RetryPolicy
from tailreplay.replayer.schedule import Planned
from tailreplay.replayer.sessions import SessionFeeder
from tailreplay.replayer.timer import PreciseTimer, WakeMargin
from tailreplay.replayer.transport import Outcome, Transport
from tailreplay.replayer.users import Users
from tailreplay.tracecontext import TraceContext, new_span_id, new_trace_id
from tailreplay.traces.archive.record import Record

__all__ = ["MAX_INFLIGHT_BYTES", "Burst", "DispatchStats", "Dispatcher", "SpanSink"]

log = logging.getLogger("tailreplay.replay")

# Due times, t0 and lags are read on time.monotonic() (``clock``), never loop.time():
# under asyncio's loop the two are one clock, but uvloop's loop.time() counts whole
# milliseconds, and the dispatcher yields the last fraction of a millisecond before
# each send and measures its lag to the microsecond.
_SPIN_S = 0.0015
"""How far off the loop's own timers may fire: the last wait before a send without a
timerfd, the widest margin with one, and the margin a step of a long sleep on the
loop's timers keeps before the timerfd's."""
_STEP_S = 0.25
"""The longest sleep at a time: a stop is seen within it."""
_FIRST_MARGIN_S = 0.00025
"""How long before due the timerfd wakes the dispatcher until its wake-ups are measured
(``timer.WakeMargin``)."""
_WAKE_DEVIATIONS = 0.0
"""The timer is armed ahead of due by the wake-ups' smoothed lateness alone (their
mean), not plus deviations of it: about half the sends leave within the busy wait's
microseconds of due and the rest some tens of microseconds late. Two deviations
more put nine sends in ten on time for 2-3 points of a core at 500/s (the busy
wait), and the lag P99 within hundredths of a millisecond of this: 0.12 against
0.13 ms, 0.13 against 0.15 ms (docs/benchmarks.md, "The margin at the mean")."""
_SPIN_SHARE = 0.25
"""The widest margin, as a share of the mean time between sends: however late the host
wakes the replay, the busy wait it adds stays under this share of a core."""
_SHORTEST_SLEEP_S = 0.0001
"""A sleep shorter than this is not taken: the dispatcher yields instead. Waking from it
costs more CPU than the yield (a process that sleeps lets its vCPU halt, and each
wake-up is the kernel's work and the hypervisor's), and it comes tens of
microseconds late."""
_BUILD_MARGIN_S = 0.0005
"""Room left after a build ahead for the estimate to be wrong."""
_BUILDS_S = 0.0001
"""Builds ahead run back to back for this long at most before the dispatcher yields:
answers in flight are read at least that often, and a build of a short prompt (a few
microseconds) does not cost a turn of the loop of its own."""
_BURST_MOST = 8
"""Requests started (their tasks made) at most before the dispatcher yields, when each
next one is due already..."""
_BURST_S = 0.0002
"""...and for at most this long."""
MAX_INFLIGHT_BYTES = 256 << 20
"""Request bodies held by the requests in flight, at most: a request that would pass
it waits for a slot as at ``--max-inflight`` (one is always let go when none is in
flight). 550 prompts of 118k tokens (Mooncake's longest) fit. A body costs the
process about 4.5 times its size while the target reads it (its build, the socket's
unsent bytes), and an archive's prompts can ask 16.8M tokens (~70 MB) each: 16 such
requests to a target that does not read them took 3.9 GB without this bound, 0.7-0.9
GB under it."""


class SpanSink(Protocol):
    """Where each sent request's result goes to become a span (exporters' SpanProcess)."""

    @property
    def capture_content(self) -> bool:
        """Whether the span wants the request body (--otlp-capture-content)."""
        ...

    def emit(self, record: Record, *, request_body: bytes | None = None) -> object: ...


@dataclass
class DispatchStats:
    due: int = 0
    sent: int = 0
    completed: int = 0
    errors: int = 0
    dropped: int = 0
    in_flight: int = 0
    input_intended: int = 0
    """Recorded input tokens of synthetic-prompt requests the target reported on..."""
    input_reported: int = 0
    """...and what the target reported for them (the residual is the ratio - 1)."""
    retries: int = 0
    """Attempts after the first (``--retries policy``)."""
    dropped_for_bytes: int = 0
    """Of ``dropped``, those whose slot was held by request bodies past
    ``max_inflight_bytes`` rather than by ``max_inflight`` requests."""

    @property
    def first_attempts(self) -> int:
        """Requests sent, retries not counted: what the schedule planned and sent."""
        return self.sent - self.retries


# Behind schedule: how many requests the dispatcher starts before it yields to the loop.
#
# After starting a request (making its task) the dispatcher yields, so that the task
# sends at once, before anything else is built or started. When the next request is
# due already (the replay is behind schedule, or requests tie), each such yield is a
# turn of the loop: a poll, and the answers read since, paid for every request of a
# backlog. Starting a few before one yield, the replay catches up on less CPU
# (docs/benchmarks.md, "Replay dispatch capacity": CPU a request, saturated).


class Burst:
    """Whether the dispatcher starts the next request before it yields: only when that
    one is due already, for at most ``most`` requests in a row and ``seconds`` since
    the first of them (a request built when taken can take milliseconds)."""

    def __init__(self, most: int, seconds: float) -> None:
        self.most, self.seconds = most, seconds
        self.held = 0
        """Requests started since the last yield."""
        self._since = 0.0

    def hold(self, next_due_s: float | None, now_s: float) -> bool:
        """True: start the request due at ``next_due_s`` (None: none left) before
        yielding, the clock reading ``now_s`` (both on the schedule's offsets)."""
        due = next_due_s is not None and next_due_s <= now_s
        late = self.held and now_s - self._since > self.seconds
        if not due or self.held >= self.most or late:
            self.held = 0
            return False
        if not self.held:
            self._since = now_s
        self.held += 1
        return True


class Dispatcher:
    def __init__(
        self,
        transport: Transport,
        builder: RequestBuilder,
        *,
        headers: dict[str, str],
        max_inflight: int,
        drop_after_s: float = 0.1,
        new_trace_ids: bool = False,
        shard: int | None = None,
        on_result: Callable[[Record], None],
        spans: SpanSink | None = None,
        lookahead_items: int = LOOKAHEAD_ITEMS,
        lookahead_bytes: int = LOOKAHEAD_BYTES,
        retry: RetryPolicy | None = None,
        max_inflight_bytes: int = MAX_INFLIGHT_BYTES,
    ) -> None:
        self.transport = transport
        self.builder = builder
        self.headers = headers
        self.max_inflight = max_inflight
        self.max_inflight_bytes = max_inflight_bytes
        self._held_bytes = 0
        """Request bodies' bytes of the requests in flight."""
        self.drop_after_s = drop_after_s
        self.new_trace_ids = new_trace_ids
        self.shard = shard
        self.on_result = on_result
        self.spans = spans
        """One CLIENT span per request sent (not for dropped ones: nothing was sent)."""
        self.lookahead_items = lookahead_items
        """Requests built ahead of their due time at most (0: each built when due)..."""
        self.lookahead_bytes = lookahead_bytes
        """...and their bodies' bytes at most (``replayer/lookahead.py``)."""
        self.retry = retry
        """Retry a failed request as a client would (``replayer/retry.py``); None: never."""
        self.ahead: Lookahead | None = None
        self.stats = DispatchStats()
        self.lags_ns = array("q")
        self.yielded_s = 0.0
        """Time spent yielding until due: CPU spent on the sends' precision, not on work."""
        self._slot_freed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.stopping = asyncio.Event()
        self.stop_now = asyncio.Event()
        """A second Ctrl-C: the requests in flight get no more of their grace."""
        self.sent_all = asyncio.Event()
        """Set once nothing more will be sent: only answers are awaited."""

    async def run(self, items: Iterator[Planned], t0: float, t0_wall_ns: int) -> None:
        """Send every item at ``t0 + item.due_s`` (``clock()``); returns when all are done."""
        loop = asyncio.get_running_loop()
        timer = PreciseTimer.open(loop)
        try:
            # A task of its own: each of its several resumptions a request (a wake-up,
            # the yields until due, the send) resumes this one coroutine, not the chain
            # of the run's coroutines that await it.
            await loop.create_task(self._dispatch(loop, items, t0, t0_wall_ns, timer))
        finally:
            if timer is not None:
                timer.close()
        self.sent_all.set()
        await self._settle()

    async def _dispatch(
        self,
        loop: asyncio.AbstractEventLoop,
        items: Iterator[Planned],
        t0: float,
        t0_wall_ns: int,
        timer: PreciseTimer | None,
    ) -> None:
        stats, burst = self.stats, Burst(_BURST_MOST, _BURST_S)
        wake = WakeMargin(
            first=_FIRST_MARGIN_S, widest=_SPIN_S, share=_SPIN_SHARE, deviations=_WAKE_DEVIATIONS
        )
        ahead = self.ahead = Lookahead(
            items, self.builder, max_items=self.lookahead_items, max_bytes=self.lookahead_bytes
        )
        while (taken := ahead.take()) is not None:
            item, spec = taken
            due = t0 + item.due_s
            # Sleep until `margin` before the absolute due time, then yield to the loop
            # (a busy wait) until due, so a send lands within tens of microseconds of it.
            # The last sleep is on a timerfd (``timer.py``; the loop's own timers fire up
            # to a millisecond off, epoll and libuv counting whole ms), so it is the one
            # wake-up a request costs. Its margin is how late the wake-ups have come
            # (``WakeMargin``): the busy wait is what is left of it, a few tens of
            # microseconds on a quiet host, bounded by a share of the time between sends
            # on a busy one; without a timerfd, _SPIN_S. Longer sleeps go in _STEP_S
            # steps, so that a stop (Ctrl-C) is seen across a long lull. Time to spare
            # goes to building the requests after this one, a build at a time, each
            # only if it should end in time.
            margin = _SPIN_S if timer is None else wake.at(due)
            turned = clock()
            while (delay := due - clock() - margin) > 0 and not self.stopping.is_set():
                if ahead.build_ahead(delay - _BUILD_MARGIN_S):
                    if clock() - turned >= _BUILDS_S:
                        await asyncio.sleep(0)  # responses in flight are read between builds
                        turned = clock()
                elif timer is None or delay > _STEP_S + _SPIN_S:
                    await asyncio.sleep(min(delay, _STEP_S))
                elif delay < _SHORTEST_SLEEP_S:
                    break
                else:
                    await timer.wait_until(due - margin)
                    wake.woke(clock() - (due - margin))
            yield_from = clock()
            while clock() < due and not self.stopping.is_set():
                await asyncio.sleep(0)
            now = clock()
            self.yielded_s += now - yield_from
            if self.stopping.is_set():
                break
            stats.due += 1
            intended_ns = t0_wall_ns + round(item.due_s * 1e9)
            size = len(spec.body) if spec.body else 0
            if self._full(size) and not await self._wait_slot(due, size):
                stats.dropped += 1
                stats.dropped_for_bytes += stats.in_flight < self.max_inflight
                dropped = Outcome(error="dropped")
                self.on_result(
                    result_record(item, intended_ns, shard=self.shard, spec=spec, outcome=dropped)
                )
                # Answers and connects are read before the next build (one of a huge
                # prompt holds the loop for a second: a run of them, for many).
                await asyncio.sleep(0)
                continue
            stats.in_flight += 1
            self._held_bytes += size
            cell: list[asyncio.Task[None]] = []  # the task, for it to leave _tasks by
            cell.append(loop.create_task(self._one(item, spec, due, intended_ns, cell, size)))
            self._tasks.add(cell[0])
            # Yield, so that the new task sends now, before anything else is built or
            # started; but when the next request is due already (behind schedule, or a
            # tie), start a few first: each yield is a turn of the loop (a poll, the
            # answers read since), which a backlog pays a request each.
            if not burst.hold(ahead.next_due_s(), clock() - t0):
                await asyncio.sleep(0)

    async def run_users(
        self,
        items: Iterator[Planned],
        t0: float,
        t0_wall_ns: int,
        *,
        users: Users,
        think_s: float | None,
        limit_s: float | None,
    ) -> None:
        """The closed loop: from ``t0``, each user claims the next session (``sessions.py``;
        without sessions, the next record), sends its records one at a time, each after
        the answer to the last and a think time (``think_s``, or None: the recorded gap
        between the last one's end and this one's start), and claims another; until the
        records run out or ``limit_s`` has passed. The target's speed sets the rate
        (users / (latency + think)); a request is due when its user is ready, so it has
        no dispatch lag. ``users`` may step: users join at a step's start, and leave
        after their request in flight when the count falls below them."""
        loop = asyncio.get_running_loop()
        feeder = SessionFeeder(items)
        end = math.inf if limit_s is None else t0 + limit_s
        await asyncio.sleep(max(t0 - clock(), 0.0))

        def staying(i: int) -> bool:
            now = clock()
            return not self.stopping.is_set() and now < end and i < users.count(now - t0)

        async def user(i: int) -> None:
            while staying(i) and (claimed := feeder.claim()) is not None:
                key, first = claimed
                item: Planned | None = first
                while item is not None and staying(i):
                    if not await self._user_sends(item, t0, t0_wall_ns, users):
                        break  # the run stopped while the user waited
                    after = feeder.next(key)
                    wait = think_s if think_s is not None else _gap_s(item, after)
                    await self._pause(min(wait, end - clock()))
                    item = after
                if item is not None:  # the user leaves mid-session: another takes it on
                    feeder.give_back(key, item)

        def join(count: int) -> None:
            """Users 0..count-1 that are not running start (those that left come back)."""
            alive = {task.get_name() for task in self._tasks}
            for i in range(count):
                if f"user {i}" not in alive:
                    task = loop.create_task(user(i), name=f"user {i}")
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

        join(users.counts[0])
        steps = len(users.counts) if users.step_s is not None else 1
        for step in range(1, steps):
            await self._pause(t0 + step * (users.step_s or 0.0) - clock())
            if self.stopping.is_set() or clock() >= end or not self._tasks:
                break  # stopped, out of time, or out of records (every user left)
            join(users.counts[step])
        await self._settle()

    async def _user_sends(self, item: Planned, t0: float, t0_wall_ns: int, users: Users) -> bool:
        """A closed-loop user's request, due now, sent and answered; False when the run
        stopped before it went. Past ``max_inflight_bytes`` the user waits for bodies
        to go out (the users bound the requests in flight, not their bytes)."""
        item.phase = users.phase(clock() - t0)
        spec = self.builder.build(item)
        size = len(spec.body) if spec.body else 0
        while self._past_bytes(size) and not self.stopping.is_set():
            self._slot_freed.clear()
            await self._slot_freed.wait()
        if self.stopping.is_set():
            return False
        now = clock()
        self.stats.due += 1
        self.stats.in_flight += 1
        self._held_bytes += size
        await self._one(item, spec, now, t0_wall_ns + round((now - t0) * 1e9), size=size)
        return True

    async def _pause(self, seconds: float) -> None:
        """Sleep, unless the run stops first."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), seconds)

    async def _settle(self) -> None:
        """Wait for the requests in flight to finish, or for a stop: then the caller's
        ``cancel_in_flight`` gives them their grace."""
        if not self._tasks or self.stopping.is_set():
            return
        everything: asyncio.Future[Any] = asyncio.gather(*self._tasks, return_exceptions=True)
        stop: asyncio.Future[Any] = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({everything, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()

    async def cancel_in_flight(self, grace_s: float) -> None:
        """After a stop: give requests in flight ``grace_s`` (less if ``stop_now`` is
        set meanwhile: a second Ctrl-C), then cancel them."""
        if self._tasks:
            now: asyncio.Future[Any] = asyncio.ensure_future(self.stop_now.wait())
            everything: asyncio.Future[Any] = asyncio.gather(*self._tasks, return_exceptions=True)
            await asyncio.wait(
                {everything, now}, timeout=grace_s, return_when=asyncio.FIRST_COMPLETED
            )
            now.cancel()
            pending = {task for task in self._tasks if not task.done()}
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            # A task cancelled before its first step never ran ``_sent``'s finally.
            self._tasks.difference_update([task for task in pending if task.done()])

    def _full(self, size: int) -> bool:
        """No slot for a request of ``size`` body bytes: ``max_inflight`` requests in
        flight, or their bodies and this one past ``max_inflight_bytes``."""
        return self.stats.in_flight >= self.max_inflight or self._past_bytes(size)

    def _past_bytes(self, size: int) -> bool:
        """A request of ``size`` body bytes would take those in flight past
        ``max_inflight_bytes`` (one always goes when none is in flight)."""
        return self.stats.in_flight > 0 and self._held_bytes + size > self.max_inflight_bytes

    async def _wait_slot(self, due: float, size: int) -> bool:
        deadline = due + self.drop_after_s
        while self._full(size):
            left = deadline - clock()
            if left <= 0:
                return False
            self._slot_freed.clear()
            try:
                await asyncio.wait_for(self._slot_freed.wait(), left)
            except TimeoutError:
                return False
        return True

    def _context(self, item: Planned) -> TraceContext:
        record = item.record
        if self.new_trace_ids or record.trace_id is None:
            return TraceContext(new_trace_id(), new_span_id())
        return TraceContext(record.trace_id, new_span_id())  # a new span in the original trace

    async def _one(
        self,
        item: Planned,
        spec: RequestSpec,
        due: float,
        intended_ns: int,
        cell: list[asyncio.Task[None]] | None = None,
        size: int = 0,
    ) -> None:
        """Send one planned request; under a retry policy, again while it says to (each
        attempt its own result and span, in the same trace), holding its slot (and
        ``size`` of ``max_inflight_bytes``). Run as the task in ``cell``, it leaves
        ``_tasks`` as it ends (a done callback would cost the loop one more callback a
        request)."""
        ctx = self._context(item)
        attempt, retry_of, retry_due = 1, None, due
        try:
            while True:
                # The send's wall time is the due wall time plus the time since due on the
                # monotonic clock: one clock read, so a preemption between two reads
                # (a busy machine) cannot make them disagree, and a step of the wall clock
                # mid-run bends nothing.
                now = clock()
                since_ns = round((now - due) * 1e9)
                # A retry's lag is from when the policy said to send it.
                late_ns = round((now - retry_due) * 1e9)
                if attempt == 1:  # the dispatch's lag; a retry's wait is the policy's
                    self.lags_ns.append(late_ns)
                sent = Sent(intended_ns + since_ns, late_ns, ctx)
                outcome, spec = await self._attempt(
                    item, spec, intended_ns, sent, attempt, retry_of
                )
                wait = None if self.retry is None else self.retry.delay_s(outcome, attempt)
                if wait is None or self.stopping.is_set():
                    return
                retry_due = clock() + wait
                await self._pause(wait)
                if self.stopping.is_set():
                    return
                self.stats.retries += 1
                attempt, retry_of = attempt + 1, ctx.span_id
                ctx = TraceContext(ctx.trace_id, new_span_id())
        finally:
            self.stats.in_flight -= 1
            self._held_bytes -= size
            self._slot_freed.set()
            if cell is not None:
                self._tasks.discard(cell[0])

    async def _attempt(
        self,
        item: Planned,
        spec: RequestSpec,
        intended_ns: int,
        sent: Sent,
        attempt: int,
        retry_of: bytes | None,
    ) -> tuple[Outcome, RequestSpec]:
        """One send of a request, and its result handed on; what came back and the
        request as finally sent."""
        traceparent = sent.ctx.traceparent()
        self.stats.sent += 1
        outcome = Outcome(error="cancelled")
        began_ns = monotonic_ns()
        try:
            outcome = await self.transport.send(spec, self.headers, traceparent)
            if outcome.status in (400, 422) and self.builder.rejects_forced_fields(
                outcome.error_text
            ):
                # Sent with min_tokens/ignore_eos (perhaps built before the first refusal):
                # send again without them; the result describes this second request.
                spec = self.builder.build(item)
                outcome = await self.transport.send(spec, self.headers, traceparent)
        except asyncio.CancelledError:
            # How long it had been in flight: a lower bound on the latency it would have had.
            outcome = Outcome(error="cancelled", duration_ns=monotonic_ns() - began_ns)
            raise
        except Exception as exc:  # a failure is a result, never the end of the run
            log.debug("request failed in the transport", exc_info=True)
            outcome = Outcome(error=type(exc).__name__)
        finally:
            self._done(item, spec, outcome, intended_ns, sent, attempt, retry_of)
        return outcome, spec

    def _done(
        self,
        item: Planned,
        spec: RequestSpec,
        outcome: Outcome,
        intended_ns: int,
        sent: Sent,
        attempt: int = 1,
        retry_of: bytes | None = None,
    ) -> None:
        """Account for a finished attempt (or a cancelled one) and hand on its result."""
        stats = self.stats
        ok = outcome.error is None and outcome.status < 400
        stats.completed += 1
        stats.errors += not ok
        if ok and spec.prompt_tokens and outcome.prompt_tokens:
            self.builder.prompts.observe(spec.prompt_tokens, outcome.prompt_tokens)
            if item.record.input_tokens:
                stats.input_intended += prompt_tokens(item.record)
                stats.input_reported += outcome.prompt_tokens
        result = result_record(
            item, intended_ns, shard=self.shard, spec=spec, outcome=outcome, sent=sent
        )
        if self.retry is not None:
            result.attempt, result.retry_of = attempt, retry_of
        self.on_result(result)
        if self.spans is not None:
            body = spec.body if self.spans.capture_content else None
            self.spans.emit(result, request_body=body)


def _gap_s(item: Planned, after: Planned | None) -> float:
    """The recorded think time between two requests of a session: from the end of the
    first to the start of the next (0 when it overlapped, or the session ended)."""
    if after is None:
        return 0.0
    first = item.record
    end_ns = first.start_ns + (first.duration_ns or 0)
    return max(after.record.start_ns - end_ns, 0) / 1e9
