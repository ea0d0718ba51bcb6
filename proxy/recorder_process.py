"""The recorder process: reads batches of exchanges from the proxy, builds and writes records.

Its counters live in a small shared array (``Stat``) that the proxy reads for
/metrics and, when this process dies, to count exactly what it never wrote.
What the array says was written is what reached the archive file: the writer
publishes its count right after each write (``ArchiveWriter(on_written=...)``).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from typing import TYPE_CHECKING, Any

from tailreplay.dialects import ROUTES, route_label
from tailreplay.proxy.config import ProxyConfig, archive_header
from tailreplay.proxy.exchange import Exchange
from tailreplay.traces.archive.record import Record

if TYPE_CHECKING:
    from tailreplay.proxy.record_builder import RecordBuilder
    from tailreplay.traces.archive.writer import ArchiveWriter

__all__ = ["Stat", "child_main"]


class Stat:
    """Indices into the shared counter array."""

    WRITTEN = 0
    WRITER_DROPPED = 1
    SAMPLED_OUT = 2
    FAILED = 3
    BACKLOG = 4
    """Exchanges of the batch in hand not yet built (the proxy's backlog gauge counts
    from its own side: what it sent less what is accounted for)."""
    HANDLED = 5
    """Exchanges built and handed on (the progress the proxy watches for a hang)."""
    SHED = 6
    """Records built shed (``ProxyConfig.shed_after_s``): a part of those written,
    sampled out or dropped by the writer, not a fate of its own."""
    TOKENS = 7  # then (input, output) per route in ROUTES order
    SIZE = 7 + 2 * len(ROUTES)
    ACCOUNTED = (WRITTEN, WRITER_DROPPED, SAMPLED_OUT, FAILED)
    """The counters that together account for every exchange the recorder received."""


def child_main(conn: Any, ready: Any, config: ProxyConfig, stats: Any) -> None:
    """The recorder process: read batches until the proxy closes the pipe."""
    # The proxy relays shutdown by closing the pipe; signals meant for the process
    # group must not cut the recorder short while it still holds records.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Traffic first, recording second: when the machine is short of CPU the
    # forwarding process gets it, and the recorder catches up from the pipe (or,
    # past its limit, drops and counts) instead of slowing every request.
    os.nice(10)
    from tailreplay.errors import TailreplayError
    from tailreplay.proxy.record_builder import RecordBuilder
    from tailreplay.traces.text.tokens import get

    try:
        writer = _open_writer(config, stats)
        get()  # load the tokenizer before saying ready
    except OSError as exc:
        ready.send(f"cannot write archives in {config.out_dir}: {exc.strerror or exc}")
        return
    except TailreplayError as exc:
        ready.send(f"cannot write archives in {config.out_dir}: {exc}")
        return
    with contextlib.ExitStack() as stack:
        # Spans are made here, from the finished records, off the request path.
        spans = stack.enter_context(config.spans()) if config.spans is not None else None
        ready.send("ok")
        builder = RecordBuilder(config, writer, spans)
        tokens = _TokenCounter()
        builder.on_record = tokens
        try:
            _record_batches(conn, builder, stats, tokens)
        finally:
            writer.close()


def _open_writer(config: ProxyConfig, stats: Any) -> ArchiveWriter:
    from tailreplay.traces.archive.writer import ArchiveWriter

    def written(n: int) -> None:
        stats[Stat.WRITTEN] = n

    def dropped(n: int) -> None:
        stats[Stat.WRITER_DROPPED] = n

    return ArchiveWriter(
        directory=config.out_dir,
        prefix=config.prefix,
        header=archive_header(config),
        rotate_bytes=config.rotate_bytes,
        rotate_interval_s=config.rotate_interval_s,
        flush_interval=config.flush_interval_s,
        compress=config.compress,
        queue_size=config.queue_size,
        on_written=written,
        on_dropped=dropped,
        # Packed (and checked) here, as each record is built: the writer thread then
        # only writes bytes, and the two threads no longer trade the GIL for every
        # batch (about 3 µs a record less CPU, measured side by side).
        pack_on_append=True,
    )


_ROUTE_INDEX = {route: i for i, route in enumerate(ROUTES)}


class _TokenCounter:
    """Adds each record's tokens to its route's counters (what /metrics shows), in a
    list published with the other counts: an item of the shared array costs a ctypes
    call, four a record where the list costs none."""

    def __init__(self) -> None:
        self.counts = [0] * (2 * len(ROUTES))
        """(input, output) per route in ROUTES order, since this recorder started."""

    def __call__(self, record: Record) -> None:
        base = 2 * _ROUTE_INDEX[route_label(record.path)]
        self.counts[base] += record.input_tokens or 0
        self.counts[base + 1] += record.output_tokens or 0


def _record_batches(conn: Any, builder: RecordBuilder, stats: Any, tokens: _TokenCounter) -> None:
    """Build and hand to the writer the record of every exchange, until the pipe closes."""
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        batch: list[Exchange] = pickle.loads(data)
        stats[Stat.BACKLOG] = len(batch)
        for i, ex in enumerate(batch, 1):
            builder.build(ex)
            if i % _PUBLISH_EVERY == 0:  # a long batch shows progress as it goes
                _publish(stats, builder, tokens, len(batch) - i)
        _publish(stats, builder, tokens, 0)


_PUBLISH_EVERY = 64


def _publish(stats: Any, builder: RecordBuilder, tokens: _TokenCounter, backlog: int) -> None:
    stats[Stat.TOKENS :] = tokens.counts
    stats[Stat.SAMPLED_OUT] = builder.sampled_out
    stats[Stat.FAILED] = builder.failed
    stats[Stat.SHED] = builder.shed
    stats[Stat.HANDLED] += stats[Stat.BACKLOG] - backlog
    stats[Stat.BACKLOG] = backlog
