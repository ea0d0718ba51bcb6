"""Batches from the event loop to a child process, over a pipe that never blocks the loop.

The proxy's recorder and the replayer's span exporter both do their slow work in
a child process; the loop only pickles a batch now and then and writes it to the
pipe through an asyncio write transport. When the child falls behind and the
bytes waiting pass ``limit``, the batch is dropped (the caller counts it): a
request is never made to wait for recording or telemetry.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import struct
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["BatchPipe"]


class BatchPipe:
    def __init__(self, conn: Connection, limit: int) -> None:
        self._conn = conn
        self.limit = limit
        self._transport: asyncio.WriteTransport | None = None

    async def attach(self) -> None:
        """Start writing from the running loop."""
        loop = asyncio.get_running_loop()
        pipe = os.fdopen(os.dup(self._conn.fileno()), "wb", buffering=0)
        self._conn.close()
        self._transport, _ = await loop.connect_write_pipe(asyncio.Protocol, pipe)

    def send(self, batch: list[Any]) -> bool:
        """Queue ``batch`` for the child; False if it was dropped (child behind or gone)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return False
        if transport.get_write_buffer_size() > self.limit:
            return False
        data = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        # multiprocessing.Connection framing, so the child can use recv_bytes().
        transport.write(struct.pack("!i", len(data)) + data)
        return True

    def close(self) -> None:
        """End of input: the child reads what was sent, then EOF."""
        if self._transport is not None:
            self._transport.close()
        else:
            self._conn.close()
