"""The simulator's engine serving a schedule in-process, on a virtual clock
(``replay --offline``): the same continuous batching as ``tailreplay sim``
(``batching.Engine``, unchanged), with no HTTP, no sockets and no waiting.

Each request is submitted to the engine at its due time on the virtual clock
(``virtual_clock``) and its tokens are timed as the engine hands them out, so the
figures are the model's exactly: no timer jitter, no client, no network, and a
window of minutes is served in the seconds the bookkeeping takes. What the HTTP
path adds is left out: the server's and the client's own few hundred microseconds a
request, and the prompt's text (lengths are the schedule's exactly, so the prefix
cache sees only the sharing a request's ``blocks`` say).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tailreplay.errors import NotMeasured
from tailreplay.sim.batching import Engine, NeverFits, QueueFull, Sequence
from tailreplay.sim.profiles import EngineProfile
from tailreplay.sim.virtual_clock import Stalled, run_virtual

__all__ = ["OfflineRequest", "Served", "block_chain", "serve_offline"]

K = TypeVar("K")

BATCH = 512
"""Served requests handed on at a time (the caller's thread takes them in batches)."""


@dataclass(frozen=True, slots=True)
class OfflineRequest:
    due_s: float
    """When it arrives, from the start of the run."""
    prompt_tokens: int
    output_tokens: int
    """Tokens to generate: the engine generates exactly these (a forced length); 0: a
    call that generates nothing (``GET /v1/models``), answered at once, as the
    simulator's server answers it, without the engine."""
    blocks: list[int] = field(default_factory=list)
    """The chained hashes of its prompt's full blocks, as the prefix cache names them
    (``block_chain``); empty: it shares nothing."""


@dataclass(slots=True)
class Served:
    """What one request got: the engine's answer in the terms a client measures."""

    status: int
    """200; 429 (the queue was full); 400 (it can never fit)."""
    token_s: list[float] = field(default_factory=list)
    """Each token's time, from the request's due time (tokens of one step share one)."""
    cached_tokens: int | None = None
    error_text: str = ""


def block_chain(
    shared: Iterable[int], prompt_tokens: int, block_size: int, own: int, per_shared: int
) -> list[int]:
    """A prompt's block hashes for the prefix cache: each of ``shared`` (a recorded
    prefix hash) stands for ``per_shared`` blocks of ``block_size`` tokens that every
    prompt naming it holds, the rest of the prompt is its own (``own`` salts it);
    chained as ``prefix_cache.block_hashes`` chains them, so two prompts share blocks
    exactly as far as their leading shared hashes agree.

    >>> a = block_chain([7, 8], 100, 16, own=1, per_shared=2)
    >>> b = block_chain([7, 9], 100, 16, own=2, per_shared=2)
    >>> len(a), a[:2] == b[:2], a[2] == b[2]
    (6, True, False)
    """
    out: list[int] = []
    parent, full = 0, prompt_tokens // block_size
    for value in shared:
        for j in range(per_shared):
            if len(out) == full:
                return out
            parent = hash((parent, value, j))
            out.append(parent)
    while len(out) < full:
        parent = hash((parent, own, len(out)))
        out.append(parent)
    return out


def serve_offline(
    profile: EngineProfile,
    requests: Iterator[tuple[K, OfflineRequest]],
    emit: Callable[[list[tuple[K, Served]]], None],
    stop: threading.Event | None = None,
) -> None:
    """Serve ``requests`` (in due order, each with the caller's key) on ``profile``
    and hand each on with what it got, in batches of at most ``BATCH`` through
    ``emit``, in the order they finish; returns when all are served, or as soon as
    ``stop`` is set (those in flight are then not handed on). Raises ``NotMeasured``
    when the engine can serve none of those waiting (the head of the queue needs more
    KV room than the profile has, however long it waits)."""
    try:
        run_virtual(_Serving(profile, emit, stop).run(requests))
    except Stalled as exc:
        raise NotMeasured(f"the offline engine stalled: {exc}") from None


class _Serving(Generic[K]):
    def __init__(
        self,
        profile: EngineProfile,
        emit: Callable[[list[tuple[K, Served]]], None],
        stop: threading.Event | None,
    ) -> None:
        self.profile, self.emit, self.stop = profile, emit, stop
        self.done: list[tuple[K, Served]] = []
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self, requests: Iterator[tuple[K, OfflineRequest]]) -> None:
        loop = asyncio.get_running_loop()
        engine = Engine(self.profile)
        engine.start()
        try:
            for key, request in requests:
                if self.stop is not None and self.stop.is_set():
                    return
                if request.due_s > loop.time():
                    await asyncio.sleep(request.due_s - loop.time())
                task = loop.create_task(self._one(engine, key, request))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
                if len(self.done) >= BATCH:
                    self._hand_on()
            while self.tasks and not (self.stop is not None and self.stop.is_set()):
                # No timeout: on this clock one would only jump it. A request that can
                # never be served (nothing scheduled, nothing ready) raises Stalled.
                await asyncio.wait(set(self.tasks), return_when=asyncio.FIRST_COMPLETED)
                if len(self.done) >= BATCH:
                    self._hand_on()
            self._hand_on()
        finally:
            await engine.stop()

    async def _one(self, engine: Engine, key: K, request: OfflineRequest) -> None:
        loop = asyncio.get_running_loop()
        if request.output_tokens == 0:
            self.done.append((key, Served(200)))
            return
        try:
            seq: Sequence = engine.submit(
                request.prompt_tokens, request.output_tokens, request.blocks
            )
        except QueueFull as exc:
            self.done.append((key, Served(429, error_text=str(exc))))
            return
        except NeverFits as exc:
            self.done.append((key, Served(400, error_text=str(exc))))
            return
        served = Served(200)
        while n := await seq.next_tokens():
            served.token_s += [loop.time() - request.due_s] * n
        served.cached_tokens = seq.cached_tokens
        self.done.append((key, served))

    def _hand_on(self) -> None:
        if self.done:
            batch, self.done = self.done, []
            self.emit(batch)
