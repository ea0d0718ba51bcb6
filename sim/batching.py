"""The continuous-batching engine: one scheduler loop for the whole server.

Each step the scheduler (1) admits waiting sequences in arrival order while a slot
and KV room for their prompt remain, (2) prefills up to ``max_batched_tokens`` prompt
tokens (long prompts take several steps: chunked prefill), (3) runs one decode step
for every sequence past prefill, and (4) when the step's modelled time has passed,
hands each of those sequences one token. A sequence whose prefill completes in a
step gets its first token at the end of that step (as in vLLM), or with the profile's
``first_token_late`` at the end of the next (as llama.cpp's server). When the KV cache
cannot hold the next token of every running sequence, the newest is preempted:
its KV is freed and it waits at the head of the queue to be recomputed.

With the prefix cache on (the profile's ``prefix_caching``), the full blocks of
a prompt stay cached after their sequence ends, in an LRU that shares the KV
budget with running sequences (``tailreplay.sim.prefix_cache``): an admitted
sequence skips the prefill of its longest cached prefix, except the prompt's last
token, which is always computed (as in vLLM).

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
import random
from collections import deque
from dataclasses import dataclass

from tailreplay.sim.prefix_cache import PrefixCache
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
        "acceptance",
        "arrival",
        "block_hashes",
        "blocks",
        "cached_tokens",
        "cancelled",
        "finished",
        "generated",
        "id",
        "pending",
        "prefilled",
        "prompt_tokens",
        "target",
    )

    def __init__(
        self,
        seq_id: int,
        prompt_tokens: int,
        target: int,
        arrival: float,
        block_hashes: list[int] | None = None,
        acceptance: float = 0.0,
    ) -> None:
        self.id = seq_id
        self.acceptance = acceptance
        """Speculative decoding: each draft token's chance of acceptance."""
        self.prompt_tokens = prompt_tokens
        self.target = target
        self.arrival = arrival
        self.block_hashes = block_hashes or []
        """The chained hashes of the prompt's full blocks (empty: nothing to cache)."""
        self.blocks: list[int] = []
        """The leading ``block_hashes`` whose KV this sequence holds in the prefix cache
        (hit at admission, or computed and registered since); the rest of its context
        is its own."""
        self.cached_tokens: int | None = None
        """Prompt tokens found in the prefix cache at its first admission (None: not
        admitted yet, or the prefix cache is off)."""
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
    """Prompt tokens of the requests that got their first token (as vLLM counts them:
    the whole prompt, cached or not, once)."""
    prefill_tokens: int = 0
    """Prompt tokens computed: less prefix-cache hits, plus recomputation after preemption."""
    generation_tokens: int = 0
    preemptions: int = 0
    finished: int = 0
    cancelled: int = 0
    prefix_queries: int = 0
    """Prompt tokens looked up in the prefix cache (first admissions only, as vLLM counts)."""
    prefix_hits: int = 0
    """Of those, the tokens found cached (their prefill skipped)."""


class Engine:
    def __init__(self, profile: EngineProfile) -> None:
        self.profile = profile
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.cache = PrefixCache(profile.block_size)
        self._own = 0
        self._rng = random.Random(0)  # draft acceptance: the same run, the same tokens
        """KV tokens running sequences hold outside the prefix cache's blocks."""
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

    def submit(
        self,
        prompt_tokens: int,
        target: int,
        block_hashes: list[int] | None = None,
        acceptance: float = 0.0,
    ) -> Sequence:
        """Queue a sequence; raises QueueFull or NeverFits.

        ``block_hashes`` are its prompt's (``prefix_cache.block_hashes``); ignored
        when the profile's prefix cache is off.
        """
        self.check_fits(prompt_tokens, target)
        if len(self.waiting) >= self.profile.queue_limit:
            raise QueueFull(f"{len(self.waiting)} requests waiting; try again later")
        hashes = block_hashes if self.profile.prefix_caching else None
        now = asyncio.get_running_loop().time()
        seq = Sequence(next(self._ids), prompt_tokens, target, now, hashes, acceptance)
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
            self._release(seq)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(seq)
        seq._wake()

    @property
    def kv_used(self) -> int:
        """KV tokens running sequences hold: their own, and the cached blocks they pin
        (counted once however many share them). Free cached blocks are not in it: like
        vLLM's free block pool, they are room to be taken."""
        return self._own + self.cache.pinned_tokens

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
            prefill = self._plan_prefill()
            decoding = [s for s in self.running if not s.in_prefill]
            self._make_room(decoding, prefill)
            cost_ms = 0.0
            prefill_tokens = sum(n for _, n in prefill)
            if prefill_tokens:
                cost_ms += p.prefill_ms(prefill_tokens)
            if decoding:
                cost_ms += p.decode_ms(len(decoding))
            if not prefill_tokens and not decoding:
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
            elif cost_ms == 0.0:
                # A step the profile prices at 0 ms (a calibration clamps a cost fitted
                # below 0 to 0) still yields, or a run of them would hold the loop. A
                # late step does not: its clients' writes wait for the step after it.
                await asyncio.sleep(0)
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
            # A step on schedule took its model exactly: adding the same number keeps the
            # sums' rounding from reading a simulator on time as faster than its model.
            self.stats.achieved_s += next_start - step_start if late else cost_ms / 1000
            step_start = next_start

    def _admit(self) -> None:
        p, cache = self.profile, self.cache
        while self.waiting and len(self.running) < p.max_num_seqs:
            seq = self.waiting[0]
            # The longest cached prefix of full blocks, short of the prompt's last token:
            # that one is always computed, its logits give the first output token.
            limit = max(0, seq.prompt_tokens - 1) // p.block_size
            hit = cache.longest_hit(seq.block_hashes, limit)
            hits = seq.block_hashes[:hit]
            own = seq.context - hit * p.block_size
            # Free cached blocks it would pin stop being room; other free ones give way.
            taken = cache.free_among(hits) * p.block_size
            if self.kv_used + taken + own + 1 > p.kv_tokens:
                break  # first come, first served: no overtaking
            self.waiting.popleft()
            for block in hits:
                cache.pin(block)
            seq.blocks = list(hits)
            self._own += own
            self._evict()
            seq.prefilled = hit * p.block_size
            if p.prefix_caching and seq.cached_tokens is None:
                # A recomputation after preemption is no new query (as vLLM counts).
                seq.cached_tokens = seq.prefilled
                self.stats.prefix_queries += seq.prompt_tokens
                self.stats.prefix_hits += seq.prefilled
            self.running.append(seq)

    def _evict(self, room: int = 0) -> None:
        """Evict free cached blocks, least recently used first, until running sequences
        hold at most ``kv_tokens - room`` with the cache's free blocks."""
        limit = self.profile.kv_tokens - room
        while self.kv_used + self.cache.free_tokens > limit and self.cache.evict_one():
            pass

    def _release(self, seq: Sequence) -> None:
        """A sequence leaves the running set: its own KV is freed, its blocks stay cached."""
        self._own -= seq.context - len(seq.blocks) * self.profile.block_size
        self.cache.release(seq.blocks)
        seq.blocks = []

    def _register(self, seq: Sequence) -> None:
        """Put the prompt blocks ``seq`` has now computed into the prefix cache.

        A block another sequence computed meanwhile (both missed it at admission) is
        kept once: this sequence pins the cached copy and frees its own.
        """
        size = self.profile.block_size
        full = min(min(seq.prefilled, seq.prompt_tokens) // size, len(seq.block_hashes))
        while len(seq.blocks) < full:
            block = seq.block_hashes[len(seq.blocks)]
            self.cache.pin(block)
            seq.blocks.append(block)
            self._own -= size

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

    def _make_room(self, decoding: list[Sequence], prefill: list[tuple[Sequence, int]]) -> None:
        """Make room for the tokens this step adds: the next token of each decoder and
        the first token of each sequence whose prefill ends. Free cached blocks give way
        first; then the newest sequences are preempted."""

        def growth() -> int:
            ending = sum(s.generated == 0 and s.prefilled + n >= s.context for s, n in prefill)
            ending *= not self.profile.first_token_late  # its token comes a step later
            return len(decoding) * (1 + self.profile.spec_tokens) + ending  # drafts all taken

        while self.running and self.kv_used + growth() > self.profile.kv_tokens:
            victim = self.running.pop()
            self._release(victim)
            victim.prefilled = 0
            self.waiting.appendleft(victim)
            self.stats.preemptions += 1
            if victim in decoding:
                decoding.remove(victim)
            # The newest sequence's prefill, if planned, is the plan's last entry.
            if prefill and prefill[-1][0] is victim:
                prefill.pop()
        self._evict(growth())

    def _accepted(self, seq: Sequence) -> int:
        """Draft tokens accepted this step: in order, until the first refused."""
        n = 0
        while n < self.profile.spec_tokens and self._rng.random() < seq.acceptance:
            n += 1
        return n

    def _finish_step(self, prefill: list[tuple[Sequence, int]], decoding: list[Sequence]) -> None:
        stats = self.stats
        for seq, n in prefill:
            if seq.cancelled or seq not in self.running:
                continue
            seq.prefilled += n
            stats.prefill_tokens += n
            self._register(seq)
            if not seq.in_prefill and seq.generated == 0:
                stats.prompt_tokens += seq.prompt_tokens
                if not self.profile.first_token_late:
                    decoding.append(seq)  # its first token comes with the prefill step
        done = []
        for seq in decoding:
            if seq.cancelled:
                continue
            n = min(1 + self._accepted(seq), seq.target - seq.generated)
            seq.generated += n
            seq.prefilled += n
            seq.pending += n
            self._own += n
            stats.generation_tokens += n
            if seq.generated >= seq.target:
                seq.finished = True
                done.append(seq)
            seq._wake()
        for seq in done:
            self.running.remove(seq)
            self._release(seq)
            stats.finished += 1
