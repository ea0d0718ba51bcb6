"""Summary statistics of an archive: the figures ``tailreplay traces stats`` prints.

Definitions (docs/archive-format.md repeats them for users):
- an error is a record with ``error`` set, ``status`` 0, or ``status`` >= 400;
- latency, TTFT, TPOT and token percentiles are over successful records only;
- TPOT = (duration - TTFB) / (output tokens - 1), for streamed records with more
  than one output token;
- duration_s = last start - first start; rate_rps = (records - 1) / duration_s;
- percentiles are numpy's default (linear interpolation).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.traces.columns import Columns

__all__ = [
    "DEFAULT_BUCKETS",
    "PERCENTILES",
    "STATS_FIELDS",
    "STATS_PRESENCE",
    "bucket_bounds",
    "bucket_label",
    "error_mask",
    "percentiles",
    "summarize",
]

PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
BUCKET_PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0}
DEFAULT_BUCKETS = (50, 256, 512, 1024, 2048)
STATS_FIELDS = (
    "start_ns", "duration_ns", "ttfb_ns", "status", "input_tokens", "output_tokens", "stream",
)  # fmt: skip
STATS_PRESENCE = ("error",)
"""Fields ``summarize`` needs only to know are set: load with ``presence_only=``."""

Array = npt.NDArray[Any]


def percentiles(values: Array, which: dict[str, float] = PERCENTILES) -> dict[str, float] | None:
    """Named percentiles of ``values``, or None when there are none."""
    if values.size == 0:
        return None
    qs = np.percentile(values.astype(np.float64), list(which.values()))
    return {name: float(q) for name, q in zip(which, qs, strict=True)}


def error_mask(cols: Columns) -> npt.NDArray[np.bool_]:
    status = cols["status"]
    has_status = cols.present["status"]
    mask: npt.NDArray[np.bool_] = cols.present["error"] | (
        has_status & ((status == 0) | (status >= 400))
    )
    return mask


def bucket_bounds(edges: Sequence[int]) -> list[tuple[int | None, int | None]]:
    """[lo, hi) per bucket from its edges, open at both ends: 50,256 → <50, 50-256, >=256."""
    bounds: list[tuple[int | None, int | None]] = []
    lo: int | None = None
    for edge in sorted(set(edges)):
        bounds.append((lo, edge))
        lo = edge
    bounds.append((lo, None))
    return bounds


def bucket_label(lo: int | None, hi: int | None) -> str:
    if lo is None:
        return f"<{hi}"
    if hi is None:
        return f">={lo}"
    return f"{lo}-{hi}"


def summarize(cols: Columns, buckets: Sequence[int] = DEFAULT_BUCKETS) -> dict[str, Any]:
    """The ``stats --json`` object for ``cols`` (loaded with STATS_FIELDS and STATS_PRESENCE)."""
    n = cols.n
    start = cols["start_ns"]
    duration_s = float(start[-1] - start[0]) / 1e9 if n >= 2 else 0.0
    errors = error_mask(cols)
    ok = ~errors
    ms = 1e-6
    has = cols.present

    latency = cols["duration_ns"][ok & has["duration_ns"]] * ms
    ttft = cols["ttfb_ns"][ok & has["ttfb_ns"]] * ms
    streamed = ok & has["stream"] & cols["stream"]
    tpot_sel = streamed & has["duration_ns"] & has["ttfb_ns"] & (cols["output_tokens"] > 1)
    tpot = (
        (cols["duration_ns"][tpot_sel] - cols["ttfb_ns"][tpot_sel])
        / (cols["output_tokens"][tpot_sel] - 1)
        * ms
    )
    return {
        "records": n,
        "duration_s": duration_s,
        "rate_rps": (n - 1) / duration_s if duration_s > 0 else None,
        "error_rate": float(errors.mean()) if n else None,
        "latency_ms": percentiles(latency),
        "ttft_ms": percentiles(ttft),
        "tpot_ms": percentiles(tpot),
        "input_tokens": percentiles(cols["input_tokens"][ok & has["input_tokens"]]),
        "output_tokens": percentiles(cols["output_tokens"][ok & has["output_tokens"]]),
        "buckets": _buckets(cols, errors, buckets, duration_s),
    }


def _buckets(
    cols: Columns, errors: npt.NDArray[np.bool_], edges: Sequence[int], duration_s: float
) -> list[dict[str, Any]]:
    tokens = cols["input_tokens"]
    has_tokens = cols.present["input_tokens"]
    has_latency = cols.present["duration_ns"]
    rows = []
    for lo, hi in bucket_bounds(edges):
        sel = has_tokens.copy()
        if lo is not None:
            sel &= tokens >= lo
        if hi is not None:
            sel &= tokens < hi
        rows.append(_bucket_row(bucket_label(lo, hi), sel, cols, errors, has_latency, duration_s))
    if not has_tokens.all():
        rows.append(_bucket_row("unknown", ~has_tokens, cols, errors, has_latency, duration_s))
    return rows


def _bucket_row(
    label: str,
    sel: npt.NDArray[np.bool_],
    cols: Columns,
    errors: npt.NDArray[np.bool_],
    has_latency: npt.NDArray[np.bool_],
    duration_s: float,
) -> dict[str, Any]:
    count = int(sel.sum())
    latency = cols["duration_ns"][sel & ~errors & has_latency] * 1e-6
    return {
        "range": label,
        "count": count,
        "latency_ms": percentiles(latency, BUCKET_PERCENTILES),
        "throughput_rps": count / duration_s if duration_s > 0 else None,
        "error_rate": float(errors[sel].mean()) if count else None,
    }
