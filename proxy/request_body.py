"""A client's request body, read within bounds: a size, a pause between reads, a
deadline, and a minimum pace (Kestrel's ``MinRequestBodyDataRate``), so that a body
trickled a byte at a time is answered 408 in seconds, not after ``--timeout``.

``BodyPace`` is also what the connection guard (``proxy/admission.py``) reads to
judge, at the cap, how long a body still in progress will take to arrive.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator

from aiohttp.streams import StreamReader

__all__ = [
    "CHUNKED_OWED",
    "MIN_BODY_RATE",
    "BodyLimits",
    "BodyPace",
    "BodyTimeout",
    "BodyTooLarge",
    "read_body",
    "stream_body",
]

MIN_BODY_RATE = 240.0
"""Bytes a second a request body must average once past its grace (Kestrel's default
``MinRequestBodyDataRate``): a slow mobile link sends kilobytes a second."""
CHUNKED_OWED = 65536
"""What a chunked body (no declared length) is taken to still owe when judged at the
cap: at least this, or as much again as has come."""


class BodyTimeout(Exception):
    """A request body came too slowly: nothing for ``body_timeout_s``, under
    ``MIN_BODY_RATE`` past its grace, or not whole within the request's deadline."""


class BodyTooLarge(Exception):
    """A request body ran past ``--max-body``."""


class BodyPace:
    """How much of a request body has come since it started, of how much declared."""

    __slots__ = ("done", "length", "received", "started", "stream")

    def __init__(
        self, started: float, length: int | None = None, stream: StreamReader | None = None
    ) -> None:
        self.started = started
        self.length = length
        """Its ``Content-Length``; None for a chunked body."""
        self.stream = stream
        """The body's stream: what aiohttp has read off the socket counts as come,
        although the handler has not taken it yet (a busy loop must not make a client
        look slow)."""
        self.received = 0
        """Bytes the handler has taken."""
        self.done = False
        """The whole body came: the pace no longer matters (a long answer may follow)."""

    def arrived(self) -> int:
        stream = self.stream
        return max(self.received, stream.total_bytes if stream is not None else 0)

    def time_to_finish(self, now: float, pending: int = 0) -> float:
        """Seconds the rest of the body takes at its pace so far (``pending``: bytes
        waiting in the kernel, come but not yet read); infinite when nothing came."""
        arrived = self.arrived() + pending
        owed = self.length - arrived if self.length is not None else max(arrived, CHUNKED_OWED)
        if owed <= 0:
            return 0.0
        if arrived == 0:
            return math.inf
        return owed * max(now - self.started, 1e-6) / arrived

    def wasted(self, now: float, pending: int = 0) -> float:
        """Seconds of its slot the body wastes: the longer of the time it has taken so
        far and the time the rest needs at its pace. A sender can keep the second
        under any bound by slowing down as it goes, never the first."""
        return max(now - self.started, self.time_to_finish(now, pending))


class BodyLimits:
    """The bounds of one request body: ``limit`` bytes, ``timeout_s`` between reads,
    ``deadline_s`` in all, ``MIN_BODY_RATE`` on average after a grace of ``timeout_s``;
    progress goes to ``pace`` (the connection guard's, for eviction)."""

    __slots__ = ("deadline_s", "limit", "pace", "timeout_s")

    def __init__(
        self, limit: int, timeout_s: float, deadline_s: float, pace: BodyPace | None = None
    ) -> None:
        self.limit, self.timeout_s, self.deadline_s = limit, timeout_s, deadline_s
        self.pace = pace if pace is not None else BodyPace(time.monotonic())


async def _chunk(content: StreamReader, bounds: BodyLimits) -> bytes:
    """The next piece of the body, within the bounds: the wait is cut where the next
    one would be broken (the pause, the deadline, or the pace past its grace)."""
    pace = bounds.pace
    now = time.monotonic()
    elapsed = now - pace.started
    # The time by which the average must be back to MIN_BODY_RATE with no more bytes.
    pace_due = max(pace.received / MIN_BODY_RATE, bounds.timeout_s) - elapsed
    wait = min(bounds.timeout_s, bounds.deadline_s - elapsed, pace_due)
    if wait <= 0:
        raise BodyTimeout
    # What has come already needs no timer: a small body is usually whole by the
    # time its handler runs, and a timer set and cancelled per read cost ~9% of a
    # request's CPU in the proxy.
    chunk = content.read_nowait()
    if not chunk and not content.at_eof():
        try:
            async with asyncio.timeout(wait):
                chunk = await content.readany()
        except TimeoutError:
            raise BodyTimeout from None
    pace.received += len(chunk)
    pace.done = not chunk
    if pace.received > bounds.limit:
        raise BodyTooLarge
    return chunk


async def read_body(content: StreamReader, bounds: BodyLimits) -> bytes:
    """The whole body, within ``bounds``."""
    parts: list[bytes] = []
    while chunk := await _chunk(content, bounds):
        parts.append(chunk)
        if content.at_eof():  # the end came with it: no read needed to learn so
            bounds.pace.done = True
            break
    return b"".join(parts)


async def stream_body(content: StreamReader, bounds: BodyLimits) -> AsyncIterator[bytes]:
    """The body as it comes (for the upstream), within the same bounds as ``read_body``."""
    while chunk := await _chunk(content, bounds):
        yield chunk
