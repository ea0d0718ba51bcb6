"""Every request of a run, one JSON line each, with every time it has: the raw export.

What the report summarises, request by request, for a tool of the user's own:
when the request was due and sent, when its first and every later token event came,
when it ended, its status, tokens and attempt. Times are unix nanoseconds as
integers (``start_ns`` is the record's; a replay's ``due_ns`` and ``sent_ns``),
durations milliseconds as floats. The figures follow ``traces/results/figures.py``:
``latency_ms`` is start to the last byte, ``ttft_ms`` start to the first token event
(streamed answers only), ``token_ns`` the arrival of each token event
(``chunk_gaps_us`` summed from the first; microsecond steps). A stream of more than
``tailreplay.http.sse.EXACT_GAPS`` + 1 events lists the first that many; the rest of its
gaps are in ``later_gaps`` as the archive keeps them (``[bin, count, ...]`` of 1%
bins, ``tailreplay/http/sse.py``). ``generates`` is false for calls that generate
nothing (``GET /v1/models``), which every figure of the report leaves out; ``failed``
is ``metrics.is_error``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from itertools import accumulate
from pathlib import Path
from typing import Any

from tailreplay.openai_api import generates_nothing
from tailreplay.private import open_private, replaced_whole
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.results.figures import is_error

__all__ = ["export_raw", "raw_line"]

_IDS = ("trace_id", "span_id", "orig_trace_id", "orig_span_id", "retry_of")
_AS_IS = (
    "method",
    "path",
    "model",
    "stream",
    "status",
    "error",
    "attempt",
    "tail",
    "shard",
    "phase",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "max_tokens",
    "finish_reason",
)


def raw_line(m: dict[str, Any]) -> dict[str, Any]:
    """One record (a map as the reader gives it) as its raw-export object."""
    out: dict[str, Any] = {}
    for name in _IDS:
        value = m.get(name)
        out[name] = value.hex() if isinstance(value, bytes) else None
    for name in _AS_IS:
        out[name] = m.get(name)
    start = m["start_ns"]
    out["due_ns"], out["sent_ns"], out["start_ns"] = m.get("intended_ns"), m.get("sent_ns"), start
    duration, ttfb = _int(m.get("duration_ns")), _int(m.get("ttfb_ns"))
    out["end_ns"] = start + duration if duration is not None else None
    out["latency_ms"] = duration / 1e6 if duration is not None else None
    lag = _int(m.get("lag_ns"))
    out["lag_ms"] = lag / 1e6 if lag is not None else None
    streamed = m.get("stream") is True
    out["ttft_ms"] = ttfb / 1e6 if streamed and ttfb is not None else None
    out["first_token_ns"] = start + ttfb if ttfb is not None else None
    out["token_ns"] = list(_token_times(start, ttfb, m.get("chunk_gaps_us"))) if streamed else []
    out["second_token_ns"] = out["token_ns"][1] if len(out["token_ns"]) > 1 else None
    out["later_gaps"] = m.get("chunk_gaps_more")
    out["generates"] = not generates_nothing(m.get("method"), m.get("path"))
    out["failed"] = is_error(m.get("status"), m.get("error"))
    return out


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _token_times(start: int, ttfb: int | None, gaps: Any) -> Iterator[int]:
    """Each token event's arrival: the first at TTFT, each later one a gap after."""
    if ttfb is None:
        return
    first = start + ttfb
    yield first
    if isinstance(gaps, list):  # validated: ints
        for since_first in accumulate(int(g) * 1000 for g in gaps):
            yield first + since_first


def export_raw(
    paths: Iterable[str | os.PathLike[str]], out: Path, *, skip_corrupt: bool = False
) -> tuple[int, list[str]]:
    """Write every record of ``paths`` to ``out`` as a raw-export line; (lines written,
    the reader's warnings). Written beside ``out`` and renamed into place at the end."""
    reader = ArchiveReader(paths, skip_corrupt=skip_corrupt)
    n = 0
    with replaced_whole(out) as part, open_private(part, encoding="utf-8") as f:
        for m in reader.iter_maps():
            f.write(json.dumps(raw_line(m), allow_nan=False) + "\n")
            n += 1
    return n, reader.warnings()
