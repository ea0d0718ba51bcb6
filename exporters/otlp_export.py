"""``traces export otlp``: an archive's records become spans at an OTLP endpoint.

Each record becomes the span its exchange would have produced — its recorded
ids, timestamps and attributes; a capture's records are SERVER spans, a
replay's CLIENT spans linked to their originals. ``rebase`` shifts every
timestamp by one amount so the last span ends now: some backends (Tempo's
ingester, Jaeger with a short retention) drop spans older than a window.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from opentelemetry.trace import SpanKind

from tailreplay.errors import RunFailed
from tailreplay.exporters.otlp import OtlpOptions, SyncBatches, Telemetry
from tailreplay.exporters.spans import RecordSpans
from tailreplay.traces.columns import Columns
from tailreplay.traces.reader import ArchiveReader

__all__ = ["export_otlp", "rebase_shift"]


def rebase_shift(cols: Columns, now_ns: int) -> int:
    """The shift that makes the last span end at ``now_ns`` (``cols`` with duration_ns)."""
    if cols.n == 0:
        return 0
    ends = cols["start_ns"] + cols["duration_ns"]  # absent durations read as 0
    return now_ns - int(ends.max())


def export_otlp(
    paths: Sequence[str | os.PathLike[str]],
    options: OtlpOptions,
    *,
    shift_ns: int = 0,
    skip_corrupt: bool = False,
    progress: Callable[[int], None] = lambda n: None,
) -> int:
    """Send one span per record, its times moved by ``shift_ns``; returns how many.

    Raises RunFailed (exit 1) at the first batch the endpoint refuses (or does not
    answer within the timeout), saying how many spans were delivered.
    """
    telemetry = Telemetry.start(
        options, service="tailreplay-export", warn=lambda line: None, batch=False
    )
    spans = RecordSpans(telemetry, kind=SpanKind.SERVER)
    batches = telemetry.processor if isinstance(telemetry.processor, SyncBatches) else None
    where = options.resolved_endpoint() or "the OTLP endpoint"
    sent = 0
    try:
        for record in ArchiveReader(paths, skip_corrupt=skip_corrupt):
            record.start_ns += shift_ns
            # A replay's results are client spans (linked to what they replayed).
            kind = SpanKind.CLIENT if record.orig_trace_id is not None else SpanKind.SERVER
            spans.emit(record, kind=kind)
            sent += 1
            if sent % 512 == 0:
                _check(batches, telemetry, sent, where)
                progress(sent)
        telemetry.provider.force_flush()
        _check(batches, telemetry, sent, where)
        progress(sent)
    finally:
        telemetry.provider.shutdown()
    return sent


def _check(batches: SyncBatches | None, telemetry: Telemetry, sent: int, where: str) -> None:
    if batches is not None and batches.failed:
        delivered = telemetry.exporter.exported if telemetry.exporter is not None else 0
        raise RunFailed(
            f"OTLP export to {where} failed: {delivered:,} of the first {sent:,} spans "
            "delivered; the rest were not sent"
        )
