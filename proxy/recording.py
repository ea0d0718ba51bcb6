"""The recorder sink, with the recording work in a process of its own.

Python runs one thread at a time, so record building in the proxy's process —
usage parsing, tokenising prompts, hashing, redaction, packing — would be paid
for by forwarding (it cost ~40% of throughput when done on a thread). Instead
the proxy's event loop only appends each finished exchange to a batch; every
20 ms the batch is pickled and written to a pipe (non-blocking) read by the
recorder process, which builds records and writes the archive.

Nothing here can hurt a request: when the pipe backs up past a limit, batches
are dropped and counted. If the proxy dies (even kill -9), the recorder sees
the pipe close, writes what it has, and exits. Counters come back through a
small shared array that /metrics reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tailreplay.batch_pipe import BatchPipe
from tailreplay.openai_api import ROUTES, route_label
from tailreplay.proxy.config import ProxyConfig, archive_header
from tailreplay.proxy.exchange import Exchange
from tailreplay.traces.record import Record

if TYPE_CHECKING:
    from tailreplay.proxy.recorder import RecordBuilder
    from tailreplay.traces.writer import ArchiveWriter

__all__ = ["RecorderClient", "Stat"]

log = logging.getLogger("tailreplay.proxy")

_FLUSH_S = 0.02
_PIPE_LIMIT = 64 << 20  # bytes waiting for the recorder before batches are dropped
_MAX_BATCH = 20_000


class Stat:
    """Indices into the shared counter array."""

    WRITTEN = 0
    WRITER_DROPPED = 1
    SAMPLED_OUT = 2
    FAILED = 3
    BACKLOG = 4
    TOKENS = 5  # then (input, output) per route in ROUTES order
    SIZE = 5 + 2 * len(ROUTES)


def _child_main(conn: Any, ready: Any, config: ProxyConfig, stats: Any) -> None:
    """The recorder process: read batches until the proxy closes the pipe."""
    # The proxy relays shutdown by closing the pipe; signals meant for the process
    # group must not cut the recorder short while it still holds records.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Traffic first, recording second: when the machine is short of CPU the
    # forwarding process gets it, and the recorder catches up from the pipe (or,
    # past its limit, drops and counts) instead of slowing every request.
    os.nice(10)
    from tailreplay.proxy.recorder import RecordBuilder
    from tailreplay.traces.tokens import get

    try:
        writer = _open_writer(config)
        get()  # load the tokenizer before saying ready
    except OSError as exc:
        ready.send(f"cannot write archives in {config.out_dir}: {exc.strerror or exc}")
        return
    with contextlib.ExitStack() as stack:
        # Spans are made here, from the finished records, off the request path.
        spans = stack.enter_context(config.spans()) if config.spans is not None else None
        ready.send("ok")
        builder = RecordBuilder(config, writer, spans)
        builder.on_record = _token_counter(stats)
        try:
            _record_batches(conn, builder, stats)
        finally:
            writer.close()
            stats[Stat.WRITTEN] = writer.stats.written
            stats[Stat.WRITER_DROPPED] = writer.stats.dropped


def _open_writer(config: ProxyConfig) -> ArchiveWriter:
    from tailreplay.traces.writer import ArchiveWriter

    return ArchiveWriter(
        directory=config.out_dir,
        prefix=config.prefix,
        header=archive_header(config),
        rotate_bytes=config.rotate_bytes,
        rotate_interval_s=config.rotate_interval_s,
        flush_interval=config.flush_interval_s,
        compress=config.compress,
        queue_size=config.queue_size,
    )


def _token_counter(stats: Any) -> Callable[[Record], None]:
    """Adds each record's tokens to its route's counters (what /metrics shows)."""

    def count_tokens(record: Record) -> None:
        base = Stat.TOKENS + 2 * ROUTES.index(route_label(record.path))
        stats[base] += record.input_tokens or 0
        stats[base + 1] += record.output_tokens or 0

    return count_tokens


def _record_batches(conn: Any, builder: RecordBuilder, stats: Any) -> None:
    """Build and write the record of every exchange in every batch, until the pipe closes."""
    writer = builder.writer
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        batch: list[Exchange] = pickle.loads(data)
        stats[Stat.BACKLOG] = len(batch)
        for ex in batch:
            builder.build(ex)
        stats[Stat.WRITTEN] = writer.stats.written
        stats[Stat.WRITER_DROPPED] = writer.stats.dropped
        stats[Stat.SAMPLED_OUT] = builder.sampled_out
        stats[Stat.FAILED] = builder.failed
        stats[Stat.BACKLOG] = 0


class RecorderClient:
    """The recorder sink in the proxy's process: batches exchanges to the recorder."""

    def __init__(self, config: ProxyConfig) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stats: Any = ctx.Array("q", Stat.SIZE, lock=False)
        reader, writer = ctx.Pipe(duplex=False)
        ready_reader, ready_writer = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_child_main,
            args=(reader, ready_writer, config, self.stats),
            name="tailreplay-recorder",
            daemon=True,
        )
        self._proc.start()
        reader.close()
        ready_writer.close()
        self._pipe = BatchPipe(
            writer, limit=_PIPE_LIMIT, flush_s=_FLUSH_S, max_batch=_MAX_BATCH, on_drop=self._dropped
        )
        self._ready = ready_reader
        self._drop_logged_at = 0.0

    async def attach(self) -> None:
        """Wait until the recorder is ready, then start sending from this loop."""
        loop = asyncio.get_running_loop()
        message = await loop.run_in_executor(None, self._wait_ready)
        if message != "ok":
            from tailreplay.errors import InputError

            raise InputError(message)
        await self._pipe.attach()

    def _wait_ready(self) -> str:
        if not self._ready.poll(60):
            return "the recorder process did not start"
        try:
            message: str = self._ready.recv()
        except EOFError:
            return "the recorder process exited at start"
        return message

    @property
    def total_dropped(self) -> int:
        return self._pipe.dropped + int(self.stats[Stat.WRITER_DROPPED])

    # -- the sink --------------------------------------------------------------------

    def on_request(self, ex: Exchange) -> None:
        pass

    def on_chunk(self, ex: Exchange, size: int) -> None:
        pass

    def on_complete(self, ex: Exchange) -> None:
        # The recorder is behind or gone past the pipe's limits: drop, never block.
        self._pipe.append(ex)

    def _dropped(self, n: int) -> None:
        now = time.monotonic()
        if now - self._drop_logged_at > 10:  # one line per incident, not per record
            log.warning("recorder behind: dropping records (%d so far)", self.total_dropped)
            self._drop_logged_at = now

    async def close(self, timeout_s: float = 60.0) -> None:
        """Send what is left, close the pipe, and wait for the recorder to finish."""
        self._pipe.close()
        await asyncio.get_running_loop().run_in_executor(None, self._proc.join, timeout_s)
        if self._proc.is_alive():
            log.warning("the recorder did not finish in %.0f s; stopping it", timeout_s)
            self._proc.kill()
