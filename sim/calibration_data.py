"""What a calibration reads of result archives: each answered request's times and sizes,
and the token timeline of the streamed ones, as numpy arrays on one clock.

Times are seconds from the earliest request's send (``start_ns``); a request's first
token is ``start + ttfb`` and each later one follows by its exact gap
(``chunk_gaps_us``); gaps past the exact ones (``chunk_gaps_more``, binned) carry no
times, so such a stream's decode ends at its last byte (``duration_ns``). Every file is
put on that one clock: the results of one engine at different times, or of the shards of
one run, line up; results of different engines at the same time would not.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.errors import InputError
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record

__all__ = ["MAX_GAPS", "Observed", "UnusableResults", "read_results"]

Array = npt.NDArray[Any]

MAX_GAPS = 4_000_000
"""Exact inter-token gaps kept at most (about 100 MB of arrays): later streams still
count in the batch sizes by their first token and end, but add no gaps of their own."""


class UnusableResults(InputError):
    """Result archives that hold nothing a calibration can fit (exit 3)."""


@dataclass
class _Columns:
    start_ns: list[int] = field(default_factory=list)
    ttft_ns: list[int] = field(default_factory=list)
    """-1: not streamed (no first token known)."""
    duration_ns: list[int] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    cached_tokens: list[int] = field(default_factory=list)
    """-1: the answer reported none."""
    output_tokens: list[int] = field(default_factory=list)
    decode_ns: list[int] = field(default_factory=list)
    """First token to the last exact gap's token; -1 when later gaps were binned."""
    gap_request: list[int] = field(default_factory=list)
    gap_offsets_us: list[Array] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    gaps_us: list[Array] = field(default_factory=list)


@dataclass(frozen=True)
class Observed:
    """The answered requests of result archives, in send order."""

    files: tuple[str, ...]
    requests: int
    """Records read, answered or not."""
    failed: int
    """Records with an error or an HTTP status of 400 and above."""
    start_s: Array
    ttft_s: Array
    """NaN for an answer that was not streamed."""
    end_s: Array
    """Send to the last byte (start + latency)."""
    input_tokens: Array
    cached_tokens: Array
    """-1 where the answer reported none."""
    output_tokens: Array
    last_token_s: Array
    """When the stream's last token came (its decode's end); NaN when not streamed."""
    complete: Array
    """Streams whose every gap is here (exact and kept): their token times are known."""
    gap_request: Array
    """For each exact gap: the index of its request..."""
    gap_start_s: Array
    """...the time of the token before it..."""
    gap_s: Array
    """...and its length."""
    models: tuple[tuple[str, int], ...]
    """The model names the requests carried, most common first, with their counts."""
    gaps_dropped: bool
    """Some streams' gaps were left out (``MAX_GAPS``)."""
    warnings: tuple[str, ...] = ()
    """What the archive reader met (torn tails, records out of order)."""

    @property
    def streamed(self) -> Array:
        mask: Array = ~np.isnan(self.ttft_s)
        return mask

    @property
    def uncached_tokens(self) -> Array:
        """Prompt tokens the engine computed: input less what its prefix cache held."""
        out: Array = self.input_tokens - np.maximum(self.cached_tokens, 0)
        return out


def read_results(
    paths: Iterable[str | os.PathLike[str]], *, skip_corrupt: bool = False
) -> Observed:
    """The answered requests of ``paths`` (raises ``InputError`` for a file that cannot
    be read, ``UnusableResults`` when none was answered); with ``skip_corrupt``,
    damaged records are left out (the reader's warnings say how many)."""
    files = [os.fspath(p) for p in paths]
    reader = ArchiveReader(files, skip_corrupt=skip_corrupt)
    cols = _Columns()
    models: Counter[str] = Counter()
    requests = failed = kept_gaps = inconsistent = repeated = 0
    seen: set[bytes] = set()
    for record in reader:
        requests += 1
        if record.trace_id and record.span_id:
            # One request read twice (a file and its copy) would decode beside itself:
            # every batch it spans seen one larger.
            key = record.trace_id + record.span_id
            if key in seen:
                repeated += 1
                continue
            seen.add(key)
        if record.is_error or record.duration_ns is None or record.input_tokens is None:
            failed += record.is_error
            continue
        if _after_its_end(record):
            inconsistent += 1
            continue
        if record.model:
            models[record.model] += 1
        kept_gaps += _take(cols, record, room=MAX_GAPS - kept_gaps)
    if not cols.start_ns:
        raise UnusableResults(
            f"{', '.join(files)}: no answered request with a latency and input tokens "
            f"({requests:,} records, {failed:,} failed"
            f"{f', {inconsistent:,} with tokens after their last byte' if inconsistent else ''})"
        )
    observed = _observed(cols, tuple(files), requests, failed, models, kept_gaps >= MAX_GAPS)
    warnings = reader.warnings()
    if repeated:
        warnings.append(
            f"{repeated:,} records repeat a request read already (its trace and span ids: a "
            "copy of a file given too): each request was counted once"
        )
    if inconsistent:
        warnings.append(
            f"{inconsistent:,} answers whose first or last token came after their last byte "
            "(ttfb_ns and chunk_gaps_us past duration_ns: not one clock) were left out"
        )
    return replace(observed, warnings=tuple(warnings))


def _after_its_end(r: Record) -> bool:
    """A stream whose first token, or last exact one, came after its last byte: times
    that are not of one clock, which would stretch its decode (and every batch it spans)
    past the request itself. A microsecond a gap, and a millisecond, of rounding allowed."""
    if not r.stream or r.ttfb_ns is None or r.duration_ns is None:
        return False
    gaps = r.chunk_gaps_us or []
    last_ns = r.ttfb_ns + (0 if r.chunk_gaps_more else sum(gaps) * 1000)
    return last_ns > r.duration_ns + 1000 * len(gaps) + 1_000_000


def _take(cols: _Columns, r: Record, room: int) -> int:
    """Add one answered request; returns how many exact gaps it added."""
    index = len(cols.start_ns)
    assert r.duration_ns is not None and r.input_tokens is not None
    cols.start_ns.append(r.start_ns)
    cols.duration_ns.append(r.duration_ns)
    cols.input_tokens.append(r.input_tokens)
    cols.cached_tokens.append(-1 if r.cached_tokens is None else r.cached_tokens)
    cols.output_tokens.append(r.output_tokens or 0)
    if not r.stream or r.ttfb_ns is None:
        cols.ttft_ns.append(-1)
        cols.decode_ns.append(-1)
        cols.complete.append(False)
        return 0
    cols.ttft_ns.append(r.ttfb_ns)
    gaps = np.asarray(r.chunk_gaps_us or [], dtype=np.int64)
    cols.decode_ns.append(-1 if r.chunk_gaps_more else int(gaps.sum()) * 1000)
    kept = len(gaps) <= room
    cols.complete.append(kept and not r.chunk_gaps_more)
    if not len(gaps) or not kept:
        return 0
    cols.gap_request.append(index)
    cols.gaps_us.append(gaps)
    cols.gap_offsets_us.append(np.cumsum(gaps) - gaps)
    return len(gaps)


def _observed(
    cols: _Columns,
    files: tuple[str, ...],
    requests: int,
    failed: int,
    models: Counter[str],
    dropped: bool,
) -> Observed:
    start_ns = np.asarray(cols.start_ns, dtype=np.int64)
    t0 = int(start_ns.min())
    start = (start_ns - t0) / 1e9
    ttft_ns = np.asarray(cols.ttft_ns, dtype=np.float64)
    ttft = np.where(ttft_ns >= 0, ttft_ns / 1e9, np.nan)
    end = start + np.asarray(cols.duration_ns, dtype=np.float64) / 1e9
    decode = np.asarray(cols.decode_ns, dtype=np.float64) / 1e9
    # A stream whose later gaps were binned decodes until its last byte.
    last = np.where(decode >= 0, start + ttft + decode, end)
    last = np.where(np.isnan(ttft), np.nan, last)
    counts = [len(g) for g in cols.gaps_us]
    gap_request = np.repeat(np.asarray(cols.gap_request, dtype=np.int64), counts)
    if counts:
        offsets = np.concatenate(cols.gap_offsets_us) / 1e6
        gaps = np.concatenate(cols.gaps_us) / 1e6
    else:
        offsets = gaps = np.zeros(0)
    return Observed(
        files=files,
        requests=requests,
        failed=failed,
        start_s=start,
        ttft_s=ttft,
        end_s=end,
        input_tokens=np.asarray(cols.input_tokens, dtype=np.int64),
        cached_tokens=np.asarray(cols.cached_tokens, dtype=np.int64),
        output_tokens=np.asarray(cols.output_tokens, dtype=np.int64),
        last_token_s=last,
        complete=np.asarray(cols.complete, dtype=bool),
        gap_request=gap_request,
        gap_start_s=start[gap_request] + ttft[gap_request] + offsets,
        gap_s=gaps,
        models=tuple(models.most_common()),
        gaps_dropped=dropped,
    )
