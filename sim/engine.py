"""The continuous-batching engine: one scheduler loop for the whole server.

Each step the scheduler (1) admits waiting sequences in arrival order while a slot
and KV room for their prompt remain, (2) prefills up to ``max_batched_tokens`` prompt
tokens (long prompts take several steps: chunked prefill), (3) runs one decode step
for every sequence past prefill, and (4) when the step's modelled time has passed,
hands each of those sequences one token. A sequence whose prefill completes in a
step gets its first token at the end of that step (as in vLLM). When the KV cache
cannot hold the next token of every running sequence, the newest is preempted:
its KV is freed and it waits at the head of the queue to be recomputed.

Steps are timed against the loop's monotonic clock on an absolute schedule (each
step starts at the previous one's deadline), so timer jitter does not accumulate;
when the simulator itself is slower than the model, steps stretch
(``EngineStats.late_steps`` counts them) rather than catching up.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from dataclasses import dataclass

from tailreplay.sim.profiles import EngineProfile

__all__ = ["Engine", "EngineStats", "NeverFits", "QueueFull", "Sequence"]

_JITTER_S = 0.002
log = logging.getLogger("tailreplay.sim")


class QueueFull(Exception):
    """The waiting queue is at ``queue_limit``: answer 429."""


class NeverFits(Exception):
    """The request can never run on this engine: answer 400."""


class Sequence:
    """One request inside the engine; its handler awaits tokens through ``next_tokens``."""

    __slots__ = (
        "_waiter",
        "arrival",
        "cancelled",
        "finished",
        "generated",
        "id",
        "pending",
        "prefilled",
        "prompt_tokens",
        "target",
    )

    def __init__(self, seq_id: int, prompt_tokens: int, target: int, arrival: float) -> None:
        self.id = seq_id
        self.prompt_tokens = prompt_tokens
        self.target = target
        self.arrival = arrival
        self.generated = 0
        self.prefilled = 0
        self.pending = 0
        self.finished = False
        self.cancelled = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def context(self) -> int:
        """Tokens this sequence holds in the KV cache once prefilled."""
        return self.prompt_tokens + self.generated

    @property
    def in_prefill(self) -> bool:
        return self.prefilled < self.context

    async def next_tokens(self) -> int:
        """Wait for tokens; returns how many arrived since the last call (0: finished)."""
        while not self.pending:
            if self.finished:
                return 0
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        n, self.pending = self.pending, 0
        return n

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


@dataclass
class EngineStats:
    steps: int = 0
    late_steps: int = 0
    """Steps that ended later than modelled (the simulator was the bottleneck)."""
    modelled_s: float = 0.0
    achieved_s: float = 0.0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    finished: int = 0
    cancelled: int = 0


class Engine:
    def __init__(self, profile: EngineProfile) -> None:
        self.profile = profile
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.kv_used = 0
        self.stats = EngineStats()
        self._ids = itertools.count(1)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- the handlers' side --------------------------------------------------------

    def check_fits(self, prompt_tokens: int, max_tokens: int | None) -> None:
        p = self.profile
        limit = min(p.max_model_len, p.kv_tokens)
        wanted = prompt_tokens + (max_tokens or 1)
        if wanted > limit:
            raise NeverFits(
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {wanted} tokens ({prompt_tokens} in the messages, "
                f"{max_tokens or 1} in the completion). Please reduce the length."
            )

    def submit(self, prompt_tokens: int, target: int) -> Sequence:
        """Queue a sequence; raises QueueFull or NeverFits."""
        self.check_fits(prompt_tokens, target)
        if len(self.waiting) >= self.profile.queue_limit:
            raise QueueFull(f"{len(self.waiting)} requests waiting; try again later")
        seq = Sequence(next(self._ids), prompt_tokens, target, asyncio.get_running_loop().time())
        self.waiting.append(seq)
        self._wake.set()
        return seq

    def cancel(self, seq: Sequence) -> None:
        """The client went away: free the slot and the KV budget at once."""
        if seq.finished or seq.cancelled:
            return
        seq.cancelled = True
        seq.finished = True
        self.stats.cancelled += 1
        if seq in self.running:
            self.running.remove(seq)
            self.kv_used -= self._held(seq)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(seq)
        seq._wake()

    @property
    def kv_usage(self) -> float:
        return self.kv_used / self.profile.kv_tokens

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")
        self._task.add_done_callback(self._on_exit)

    def _on_exit(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        # A bug in the scheduler must not leave every client waiting forever.
        log.error("simulator engine stopped", exc_info=task.exception())
        for seq in [*self.running, *self.waiting]:
            self.cancel(seq)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for seq in [*self.running, *self.waiting]:
            self.cancel(seq)

    # -- the scheduler ---------------------------------------------------------------

    @staticmethod
    def _held(seq: Sequence) -> int:
        # KV is reserved for the whole context at admission and grows by one per token.
        return seq.context

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        p = self.profile
        step_start = loop.time()
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                step_start = loop.time()
            self._admit()
            decoding = [s for s in self.running if not s.in_prefill]
            self._make_room(decoding)
            prefill = self._plan_prefill()
            cost_ms = 0.0
            prefill_tokens = sum(n for _, n in prefill)
            if prefill_tokens:
                cost_ms += p.prefill_ms(prefill_tokens)
            if decoding:
                cost_ms += p.decode_ms(len(decoding))
            if cost_ms == 0.0:
                # Nothing could run (e.g. the head of the queue waits for KV room that
                # only a cancellation can free): wait for a change instead of spinning.
                self._wake.clear()
                await self._wake.wait()
                step_start = loop.time()
                continue
            deadline = step_start + cost_ms / 1000
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = loop.time()
            self._finish_step(prefill, decoding)
            # Timer wake-ups overshoot by up to a millisecond; like a pacer, the next
            # step keeps to the schedule (starts at this step's deadline) so that jitter
            # does not add up. A step late by more than that is real overload: the
            # schedule slips instead of catching up.
            late = now - deadline > _JITTER_S
            next_start = now if late else deadline
            self.stats.steps += 1
            self.stats.late_steps += late
            self.stats.modelled_s += cost_ms / 1000
            self.stats.achieved_s += next_start - step_start
            step_start = next_start

    def _admit(self) -> None:
        p = self.profile
        while self.waiting and len(self.running) < p.max_num_seqs:
            seq = self.waiting[0]
            need = seq.context + 1
            if self.kv_used + need > p.kv_tokens:
                break  # first come, first served: no overtaking
            self.waiting.popleft()
            seq.prefilled = 0
            self.running.append(seq)
            self.kv_used += self._held(seq)

    def _plan_prefill(self) -> list[tuple[Sequence, int]]:
        budget = self.profile.max_batched_tokens
        plan = []
        for seq in self.running:
            if budget <= 0:
                break
            if seq.in_prefill:
                n = min(seq.context - seq.prefilled, budget)
                plan.append((seq, n))
                budget -= n
        return plan

    def _make_room(self, decoding: list[Sequence]) -> None:
        """Preempt the newest sequences until the next token of each decoder fits."""
        while self.running and self.kv_used + len(decoding) > self.profile.kv_tokens:
            victim = self.running.pop()
            self.kv_used -= self._held(victim)
            victim.prefilled = 0
            self.waiting.appendleft(victim)
            self.stats.preemptions += 1
            if victim in decoding:
                decoding.remove(victim)

    def _finish_step(self, prefill: list[tuple[Sequence, int]], decoding: list[Sequence]) -> None:
        stats = self.stats
        for seq, n in prefill:
            if seq.cancelled or seq not in self.running:
                continue
            seq.prefilled += n
            stats.prompt_tokens += n
            if not seq.in_prefill and seq.generated == 0:
                decoding.append(seq)  # its first token comes with the prefill step
        done = []
        for seq in decoding:
            if seq.cancelled:
                continue
            seq.generated += 1
            seq.prefilled += 1
            seq.pending += 1
            self.kv_used += 1
            stats.generation_tokens += 1
            if seq.generated >= seq.target:
                seq.finished = True
                done.append(seq)
            seq._wake()
        for seq in done:
            self.running.remove(seq)
            self.kv_used -= self._held(seq)
            stats.finished += 1
