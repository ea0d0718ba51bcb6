"""Spans made and exported in a process of their own, for the replayer.

Encoding spans to protobuf costs ~40 µs each in Python and runs on the
exporter's thread — in the replayer's process that thread takes the GIL from
the dispatch loop for tens of milliseconds per batch, and dispatch lag P99 went
from 0.25 ms to 40 ms at 500 requests/s (bench/telemetry.py). So the loop packs
each finished result record (msgpack, as in an archive: 2.6 µs) and appends it to
a list; every 50 ms the list goes onto a non-blocking pipe to a child process that
samples, makes the spans and exports them. A backed-up pipe drops batches
(counted) rather than wait. Records are packed one at a time, not pickled as a
batch: a batch's Records pickled at once (4.5 µs each) held the loop 1.1 ms every
50 ms at 5,000 requests/s, and sends due meanwhile waited.

The proxy needs none of this: its recorder process already makes its spans.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import signal
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import msgpack

from tailreplay.batch_pipe import BatchPipe
from tailreplay.exporters.otlp_options import OtlpOptions
from tailreplay.traces.archive.record import UNPACKABLE, Record, pack_record

__all__ = ["CLOSE_S", "SpanProcess", "replay_spans"]

_FLUSH_S = 0.05
_PIPE_LIMIT = 32 << 20  # bytes waiting for the child before batches are dropped
CLOSE_S = 5.0
"""The most a run's end waits for its spans (docs/telemetry.md): from the close to the
child gone, whatever the collector does."""
_REPORT_S = 0.5
"""Of ``CLOSE_S``, what the child keeps back to send its counts and exit; past the whole
of it the parent kills the child."""


def _child_main(
    conn: Any,
    result: Any,
    options: OtlpOptions,
    service: str,
    server: tuple[str, int] | None,
    extra: dict[str, Any],
    failed: Any,
    deadline: Any,
) -> None:
    # The parent handles Ctrl-C and then closes the pipe; we must outlive it to flush.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Spans can wait; the dispatcher cannot: on a busy machine it gets the CPU first.
    os.nice(10)
    from opentelemetry.trace import SpanKind

    from tailreplay.exporters.otlp import Telemetry
    from tailreplay.exporters.spans import RecordSpans

    def warn(line: str) -> None:
        failed.value = 1  # the parent says it, once, on its own stderr

    telemetry = Telemetry.start(options, service=service, warn=warn)
    spans = RecordSpans(telemetry, kind=SpanKind.CLIENT, server=server, extra=extra)
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            break
        batch: list[tuple[bytes, bytes | None]] = pickle.loads(data)
        for packed, request_body in batch:
            spans.emit(Record.from_map(msgpack.unpackb(packed)), request_body=request_body)
    # The parent set the deadline (one monotonic clock for both) before its end of input.
    left = deadline.value - _REPORT_S - time.monotonic()
    exported, lost = telemetry.close(flush_timeout_s=max(left, 0.0))
    result.send((exported, lost))
    # Now, not through the interpreter's exit: an export a hung collector holds (or a
    # gRPC channel's threads) would keep it alive past the parent's deadline.
    os._exit(0)


class SpanProcess:
    """The replayer's span sink: ``emit`` on the loop, spans made in a child process."""

    def __init__(
        self,
        options: OtlpOptions,
        *,
        service: str,
        server: tuple[str, int] | None,
        extra: Mapping[str, Any],
        say: Callable[[str], None],
    ) -> None:
        self.options = options
        self.say = say
        ctx = multiprocessing.get_context("spawn")
        self._failed: Any = ctx.Value("b", 0, lock=False)
        self._deadline: Any = ctx.Value("d", 0.0, lock=False)
        reader, writer = ctx.Pipe(duplex=False)
        self._result, result_writer = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_child_main,
            args=(
                reader,
                result_writer,
                options,
                service,
                server,
                dict(extra),
                self._failed,
                self._deadline,
            ),
            name="tailreplay-spans",
            daemon=True,
        )
        self._proc.start()
        reader.close()
        result_writer.close()
        self._pack = msgpack.Packer().pack
        self._unpackable = 0
        self._pipe = BatchPipe(
            writer, limit=_PIPE_LIMIT, flush_s=_FLUSH_S, on_flush=self._warn_once
        )
        self._warned = False

    @property
    def capture_content(self) -> bool:
        return self.options.capture_content

    async def attach(self) -> None:
        """Start sending from the running loop (a non-blocking pipe)."""
        await self._pipe.attach()

    def emit(self, record: Record, *, request_body: bytes | None = None) -> None:
        try:
            packed = pack_record(self._pack, record)
        except UNPACKABLE:  # a value of no record field's type: this span alone is lost
            self._unpackable += 1
            return
        self._pipe.append((packed, request_body))

    async def close(self, bound_s: float = CLOSE_S) -> tuple[int, int] | None:
        """Send the rest and let the child flush, all within ``bound_s``: (spans exported,
        not delivered), or None when the child could not say in time (it is killed)."""
        deadline = time.monotonic() + bound_s
        self._deadline.value = deadline  # read by the child at its end of input
        self._pipe.close()
        self._warn_once()
        loop = asyncio.get_running_loop()
        ready = await loop.run_in_executor(
            None, self._result.poll, max(deadline - time.monotonic(), 0.0)
        )
        counts = self._result.recv() if ready else None
        left = max(deadline - time.monotonic(), 0.1)  # its counts sent, it exits at once
        await loop.run_in_executor(None, self._proc.join, left)
        if self._proc.is_alive():
            self._proc.kill()
            await loop.run_in_executor(None, self._proc.join)
        self._warn_once()
        if counts is None:
            return None
        exported, lost = counts
        return exported, lost + self._pipe.dropped + self._unpackable

    def _warn_once(self) -> None:
        """The child's first failed export, said once on the parent's stderr."""
        if self._failed.value and not self._warned:
            self._warned = True
            where = self.options.shown_endpoint()
            self.say(
                f"warning: OTLP export to {where} failed; spans are being dropped (the run goes on)"
            )


@asynccontextmanager
async def replay_spans(
    options: OtlpOptions,
    extra: Mapping[str, Any],
    server: tuple[str, int],
    say: Callable[[str], None],
) -> AsyncIterator[SpanProcess]:
    """The replayer's CLIENT spans for a run against ``server``, made in a child process.

    ``tailreplay replay`` hands this (with ``options`` and ``extra`` bound) to the
    replayer as ``ReplayConfig.spans``; the run enters it once its target is known
    and, on leaving, the count of spans exported is said.
    """
    spans = SpanProcess(options, service="tailreplay-replay", server=server, extra=extra, say=say)
    await spans.attach()
    try:
        yield spans
    finally:
        counts = await spans.close()
        where = options.shown_endpoint()
        if counts is None:
            say(
                f"spans: delivery to {where} unknown (the exporter did not report within "
                f"{CLOSE_S:g} s; it was stopped)"
            )
        else:
            exported, lost = counts
            line = f"spans: {exported:,} exported to {where}"
            say(line + (f", {lost:,} not delivered" if lost else ""))
