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
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import SpanKind
from yarl import URL

from tailreplay.errors import NotMeasured
from tailreplay.exporters.otlp import OtlpOptions, SyncBatches, Telemetry
from tailreplay.exporters.spans import RecordSpans
from tailreplay.tracecontext import new_span_id
from tailreplay.traces.archive.capture_header import CaptureHeader
from tailreplay.traces.archive.columns import Columns
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.replay_header import ReplayHeader, is_replay

__all__ = ["Exported", "export_otlp", "rebase_shift"]


def rebase_shift(cols: Columns, now_ns: int) -> int:
    """The shift that makes the last span end at ``now_ns`` (``cols`` with duration_ns)."""
    if cols.n == 0:
        return 0
    ends = cols["start_ns"] + cols["duration_ns"]  # absent durations read as 0
    return now_ns - int(ends.max())


@dataclass
class Exported:
    spans: int = 0
    renamed: int = 0
    """Spans sent under new span ids (linked to their originals), whose originals the
    proxy or the replayer had already exported live: a receiver drops a repeated id."""


def export_otlp(
    paths: Sequence[str | os.PathLike[str]],
    options: OtlpOptions,
    *,
    shift_ns: int = 0,
    skip_corrupt: bool = False,
    new_ids: bool | None = None,
    progress: Callable[[int], None] = lambda n: None,
) -> Exported:
    """Send one span per record, its times moved by ``shift_ns``.

    ``new_ids``: None sends new span ids only for archives whose header says their
    spans went out live; True or False forces it. Raises NotMeasured (exit 5) at the
    first batch the endpoint refuses (or does not answer within the timeout), saying
    how many spans were delivered.
    """
    telemetry = Telemetry.start(
        options, service="tailreplay-export", warn=lambda line: None, batch=False
    )
    spans = RecordSpans(telemetry, kind=SpanKind.SERVER)
    batches = telemetry.processor if isinstance(telemetry.processor, SyncBatches) else None
    where = options.shown_endpoint()
    done = Exported()
    try:
        for path in paths:
            reader = ArchiveReader([path], skip_corrupt=skip_corrupt, order="file")
            header = reader.headers[0]
            spans.server = _server(header)
            rename = _live(header) if new_ids is None else new_ids
            for record in reader:
                _emit(spans, record, shift_ns, rename)
                done.spans += 1
                done.renamed += rename
                if done.spans % 512 == 0:
                    _check(batches, telemetry, done.spans, where)
                    progress(done.spans)
        telemetry.provider.force_flush()
        _check(batches, telemetry, done.spans, where)
        progress(done.spans)
    finally:
        telemetry.provider.shutdown()
    return done


def _emit(spans: RecordSpans, record: Record, shift_ns: int, rename: bool) -> None:
    # A replay's results are client spans (linked to what they replayed).
    kind = SpanKind.CLIENT if record.orig_trace_id is not None else SpanKind.SERVER
    record.start_ns += shift_ns
    live = None
    if rename and record.trace_id is not None and record.span_id is not None:
        live = (record.trace_id, record.span_id)  # the new span links to the live one
        record.span_id = new_span_id()
    spans.emit(record, kind=kind, also_link=live)


def _server(header: dict[str, Any]) -> tuple[str, int] | None:
    """``server.address``/``port`` of an archive's spans, as live spans carry them: the
    proxy's listener for a capture, the target for a replay's results."""
    capture = CaptureHeader.read(header)
    if capture is not None and capture.listen is not None:
        return capture.listen
    upstream = header.get("upstream")
    if is_replay(header) and isinstance(upstream, str):
        url = URL(upstream)
        return url.host or "", url.port or 0
    return None


def _live(header: dict[str, Any]) -> bool:
    capture = CaptureHeader.read(header)
    return bool(ReplayHeader.read(header).otlp_live or (capture and capture.otlp_live))


def _check(batches: SyncBatches | None, telemetry: Telemetry, sent: int, where: str) -> None:
    if batches is not None and batches.failed:
        delivered = telemetry.exporter.exported if telemetry.exporter is not None else 0
        raise NotMeasured(
            f"OTLP export to {where} failed: {delivered:,} of the first {sent:,} spans "
            "delivered; the rest were not sent"
        )
