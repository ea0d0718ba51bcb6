"""Batches from the event loop to a child process, over a pipe that never blocks the loop.

The proxy's recorder and the replayer's span exporter both do their slow work in
a child process; the loop only appends items to a list, and every ``flush_s``
the list is pickled and written to the pipe through an asyncio write transport.
When the child falls behind and the bytes waiting pass ``limit`` (or the list
passes ``max_batch`` between flushes), items are dropped and counted: a request
is never made to wait for recording or telemetry.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pickle
import struct
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["BatchPipe"]


class BatchPipe:
    def __init__(
        self,
        conn: Connection,
        *,
        limit: int,
        flush_s: float,
        max_batch: int | None = None,
        on_drop: Callable[[int], None] | None = None,
        on_flush: Callable[[], None] | None = None,
    ) -> None:
        self._conn = conn
        self.limit = limit
        self.flush_s = flush_s
        self.max_batch = max_batch
        self.on_drop = on_drop
        """Called with the number just dropped (after ``dropped`` is updated)."""
        self.on_flush = on_flush
        """Called after every periodic flush (the owner's own periodic checks)."""
        self.dropped = 0
        self.sent = 0
        """Items written to the pipe (whether or not the child then read them)."""
        self._batch: list[Any] = []
        self._transport: asyncio.WriteTransport | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def attach(self) -> None:
        """Start writing from the running loop, flushing every ``flush_s``."""
        loop = asyncio.get_running_loop()
        pipe = os.fdopen(os.dup(self._conn.fileno()), "wb", buffering=0)
        self._conn.close()
        _widen(pipe.fileno())
        self._transport, _ = await loop.connect_write_pipe(asyncio.Protocol, pipe)
        self._timer = loop.call_later(self.flush_s, self._tick)

    def append(self, item: Any) -> None:
        if self.max_batch is not None and len(self._batch) >= self.max_batch:
            self._drop(1)
            return
        self._batch.append(item)

    @property
    def pending(self) -> int:
        """Items appended and not yet written to the pipe."""
        return len(self._batch)

    def take_pending(self) -> list[Any]:
        """The items appended and not yet written, which are no longer this pipe's."""
        batch, self._batch = self._batch, []
        return batch

    def _tick(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.flush_s, self._tick)
        self.flush()
        if self.on_flush is not None:
            self.on_flush()

    def flush(self) -> None:
        """Write the items appended so far (or drop them, if the child is behind or gone)."""
        batch, self._batch = self._batch, []
        if batch and not self._write(batch):
            self._drop(len(batch))

    def _write(self, batch: list[Any]) -> bool:
        transport = self._transport
        if transport is None or transport.is_closing():
            return False
        if transport.get_write_buffer_size() > self.limit:
            return False
        data = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        # multiprocessing.Connection framing, so the child can use recv_bytes().
        transport.write(struct.pack("!i", len(data)) + data)
        self.sent += len(batch)
        return True

    def _drop(self, n: int) -> None:
        self.dropped += n
        if self.on_drop is not None:
            self.on_drop(n)

    def close(self) -> None:
        """Write what is left; end of input: the child reads what was sent, then EOF."""
        if self._timer is not None:
            self._timer.cancel()
        self.flush()
        if self._transport is not None:
            self._transport.close()
        else:
            self._conn.close()


PIPE_BYTES = 1 << 20
"""The pipe's kernel buffer asked for (Linux's default limit for a user, fs.pipe-max-size)."""


def _widen(fd: int) -> None:
    """Give the pipe a 1 MiB buffer instead of 64 KiB, where the system allows it.

    The loop writes to the pipe once per iteration, as much as the kernel takes: at
    64 KiB an iteration, a loop busy serving moved about 13 MB/s to the recorder,
    less than 11,000 requests a second of 4 KB bodies (46 MB/s), and the rest was
    dropped while the recorder, on a core of its own, sat idle.
    """
    size = PIPE_BYTES
    while size > 1 << 16:
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
            return
        except (OSError, AttributeError):  # above the system's limit, or not Linux
            size //= 2
