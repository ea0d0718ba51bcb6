"""Requests built before they are due, in the dispatcher's idle time.

A synthetic 100k-token prompt is ~650 KB and takes milliseconds to build; built
when it falls due, it makes its own send late, and every request due in the same
burst waits for the builds before it (28 of them at one tick: ~100 ms). So the
dispatcher builds ahead: while it waits for the next due time, it builds the
requests after it, one at a time, each only when its build (estimated from its
size and the builds so far) ends before the dispatcher must wake. Building happens
on the event loop, between other work, never while a request is due: a thread
would share the interpreter lock with the loop, and a build holding it when a send
falls due would delay that send by up to the 5 ms switch interval.

It is refilled in batches: once taking has drained it to half its bounds, it is
built until full again (over as many waits as that takes), and not at all in
between. A build alone, a request at a time after each wake-up, finds the
builder's code and data out of the processor's caches; a batch pays that once. At
500 requests a second of short prompts that was 2-4 points of a core, a tenth to a
fifth of the replay's CPU (docs/benchmarks.md, "Builds in batches").

The look-ahead is bounded in count (``max_items``) and in body bytes
(``max_bytes``): a million-record archive of 100k-token prompts holds at most
64 MiB of built bodies (about 100 of them) beyond those in flight. A request that
finds nothing built (the look-ahead off, or the dispatcher behind schedule) is
built when it is taken, as before.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

from tailreplay.replayer.request import RequestBuilder, RequestSpec, prompt_tokens
from tailreplay.replayer.schedule import Planned

__all__ = ["LOOKAHEAD_BYTES", "LOOKAHEAD_ITEMS", "Lookahead"]

LOOKAHEAD_ITEMS = 256
"""Requests built ahead at most..."""
LOOKAHEAD_BYTES = 64 * 2**20
"""...and their bodies' bytes at most (one request is always allowed, however large)."""
_FIRST_COST_S = 100e-9
"""A build's cost per unit of size (a prompt token, or 4 body bytes) until measured;
a pessimistic start (a 100k-token prompt: 10 ms, ~3 times the real cost)."""
_FIXED_COST_S = 100e-6
"""A build's cost beyond its size (the JSON of the fields, the record's copy)."""


def _size(item: Planned) -> int:
    """How much there is to build: prompt tokens, or the recorded body's bytes / 4."""
    record = item.record
    if record.req_body is not None:
        return len(record.req_body) // 4 + 1
    return prompt_tokens(record) + 1


class Lookahead:
    """The planned requests, each with its request built, in due order."""

    def __init__(
        self,
        items: Iterator[Planned],
        builder: RequestBuilder,
        *,
        max_items: int = LOOKAHEAD_ITEMS,
        max_bytes: int = LOOKAHEAD_BYTES,
    ) -> None:
        self._items = items
        self._builder = builder
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._ready: deque[tuple[Planned, RequestSpec]] = deque()
        self._bytes = 0
        self._next: Planned | None = None
        """Read from the schedule, not built yet."""
        self._exhausted = False
        self._cost_s = _FIRST_COST_S
        self._refilling = True
        """Building until full: set once it drained to half its bounds."""
        self.built_ahead = 0
        self.built_on_take = 0
        """Requests built when taken: nothing was ready (the first, look-ahead off, or behind)."""

    @property
    def held(self) -> tuple[int, int]:
        """Requests built and waiting, and their bodies' bytes."""
        return len(self._ready), self._bytes

    def _peek(self) -> Planned | None:
        if self._next is None and not self._exhausted:
            self._next = next(self._items, None)
            self._exhausted = self._next is None
        return self._next

    def _build(self, item: Planned) -> RequestSpec:
        began = time.perf_counter()
        spec = self._builder.build(item)
        took = time.perf_counter() - began
        # Per unit of size; the larger of the last build and a decaying memory of the
        # dearest, so one quick build does not make the next long one look free.
        per_unit = max(took - _FIXED_COST_S, 0.0) / _size(item)
        self._cost_s = max(per_unit, 0.9 * self._cost_s + 0.1 * per_unit)
        return spec

    def take(self) -> tuple[Planned, RequestSpec] | None:
        """The next request in due order with its request built; None after the last."""
        if self._ready:
            item, spec = self._ready.popleft()
            self._bytes -= len(spec.body or b"")
            if spec.forced and not self._builder.forced_fields_ok:
                spec = self._builder.build(item)  # built before the target refused them
            elif self._builder.resized(item, spec):
                spec = self._builder.build(item)  # sized before the target's first counts
            return item, spec
        upcoming = self._peek()
        if upcoming is None:
            return None
        self._next = None
        self.built_on_take += 1
        return upcoming, self._build(upcoming)

    def next_due_s(self) -> float | None:
        """When the request ``take`` gives next is due (``Planned.due_s``), built or not;
        None after the last."""
        if self._ready:
            return self._ready[0][0].due_s
        upcoming = self._peek()
        return None if upcoming is None else upcoming.due_s

    def build_ahead(self, time_left_s: float) -> bool:
        """Build the next request if there is room (while refilling: from half its
        bounds until full) and its build should end within ``time_left_s``; False
        when nothing was built (full, not drained to half, at the end, or no time)."""
        count, held = len(self._ready), self._bytes
        if count >= self.max_items or (count and held >= self.max_bytes):
            self._refilling = False
            return False
        if not self._refilling:
            if 2 * count > self.max_items or 2 * held > self.max_bytes:
                return False  # more than half its bounds still built: not yet
            self._refilling = True
        item = self._peek()
        if item is None or _FIXED_COST_S + self._cost_s * _size(item) > time_left_s:
            return False
        self._next = None
        spec = self._build(item)
        self._ready.append((item, spec))
        self._bytes += len(spec.body or b"")
        self.built_ahead += 1
        return True
