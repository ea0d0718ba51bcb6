"""Summary statistics of an archive: the figures ``tailreplay traces stats`` prints.

Latency, TTFT, TPOT and the error rate are ``tailreplay.traces.results.figures``'s (the
definitions every view shares); token percentiles are over successful records. Calls
that generate nothing (``GET /v1/models``, tokenizer routes:
``tailreplay.openai_api.generates_nothing``) are in no figure but ``records``,
``rate_rps`` and their own count, ``idle_calls`` (per method and path), as ``report``
keeps them apart. A shadowed capture's copies (``proxy --shadow``) are in no figure:
``shadow_copies`` counts them. duration_s = last start - first start; rate_rps = (records - 1) /
duration_s (arrivals per second), and a bucket's rate_rps its share of it (the
buckets' add up to it, less the calls that generate nothing).
Throughput (successful requests per second of first start to last end: ``report``
and a replay's summary) is another figure, under its own name. ``clock`` is the
resolution the start times were logged at (``traces.workload.clock``: tick, jitter,
share of gaps that are 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from tailreplay.openai_api import call_name, generates_nothing
from tailreplay.traces.archive.columns import Columns
from tailreplay.traces.results.figures import Requests, error_mask, metric_values, percentiles
from tailreplay.traces.workload.clock import detect

__all__ = [
    "DEFAULT_BUCKETS",
    "STATS_FIELDS",
    "STATS_PRESENCE",
    "BucketStats",
    "ClockSummary",
    "StatsSummary",
    "bucket_bounds",
    "bucket_label",
    "requests",
    "summarize",
]

BUCKET_PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0}
DEFAULT_BUCKETS = (50, 256, 512, 1024, 2048)
STATS_FIELDS = (
    "start_ns",
    "duration_ns",
    "ttfb_ns",
    "ttft_content_ns",
    "lag_ns",
    "status",
    "input_tokens",
    "output_tokens",
    "stream",
    "method",
    "path",
    "error",
)
STATS_PRESENCE = ("shed",)
"""Fields ``summarize`` needs only to know are set: load with ``presence_only=``."""

Percentiles = dict[str, float]
"""Named percentiles (``p50``, ``p95``, ``p99``, ``p999``) of one figure."""


class ClockSummary(TypedDict):
    """The clock the start times were logged on (``traces.workload.clock.Clock``)."""

    tick_s: float | None
    tie_share: float
    jitter_s: float
    described: str


class BucketStats(TypedDict):
    """One input-length bucket of the generations."""

    range: str
    """``<50``, ``50-256``, ``>=2048``, or ``unknown`` (no input token count)."""
    count: int
    latency_ms: Percentiles | None
    rate_rps: float | None
    """The bucket's share of the arrival rate."""
    error_rate: float | None


class StatsSummary(TypedDict):
    """What ``traces stats --json`` writes, key for key (the module's docstring says
    what each figure counts)."""

    records: int
    shed: int
    """Records the proxy's recorder shed its prompt's body and statistics from."""
    duration_s: float
    rate_rps: float | None
    clock: ClockSummary
    idle_calls: dict[str, int]
    shadow_copies: int
    error_rate: float | None
    cancelled: int
    latency_ms: Percentiles | None
    latency_from_due_ms: Percentiles | None
    """A replay's results only: latency counted from each request's due time."""
    ttft_ms: Percentiles | None
    ttft_content_ms: Percentiles | None
    tpot_ms: Percentiles | None
    input_tokens: Percentiles | None
    output_tokens: Percentiles | None
    buckets: list[BucketStats]


Array = npt.NDArray[Any]


def _or_absent(cols: Columns, name: str) -> Array:
    """The column with -1 where the value is absent (the metrics' convention)."""
    values: Array = np.where(cols.present[name], cols[name], -1)
    return values


def requests(cols: Columns) -> Requests:
    """The metrics' view of columns loaded with STATS_FIELDS and STATS_PRESENCE: the
    generations (``generations(cols)``), not the calls that generate nothing."""
    keep = generations(cols)
    return Requests(
        duration_ns=_or_absent(cols, "duration_ns")[keep],
        ttfb_ns=_or_absent(cols, "ttfb_ns")[keep],
        ttft_content_ns=_or_absent(cols, "ttft_content_ns")[keep],
        lag_ns=_or_absent(cols, "lag_ns")[keep],
        output_tokens=_or_absent(cols, "output_tokens")[keep],
        stream=(cols.present["stream"] & cols["stream"])[keep],
        error=error_mask(_or_absent(cols, "status"), cols.present["error"])[keep],
    )


def generations(cols: Columns) -> npt.NDArray[np.bool_]:
    """Which records are generations: not calls that generate nothing (a method and
    path loaded)."""
    if not cols.present["method"].any():  # an imported trace: no methods, all generations
        return np.ones(cols.n, dtype=bool)
    memo: dict[tuple[Any, Any], bool] = {}

    def generates(key: tuple[Any, Any]) -> bool:
        found = memo.get(key)
        if found is None:
            found = memo[key] = not generates_nothing(*key)
        return found

    pairs = zip(cols["method"].tolist(), cols["path"].tolist(), strict=True)
    return np.fromiter(map(generates, pairs), dtype=bool, count=cols.n)


def idle_calls(cols: Columns, keep: npt.NDArray[np.bool_]) -> dict[str, int]:
    """The calls that generate nothing, counted per method and path (no query string)."""
    out: dict[str, int] = {}
    methods, paths = cols["method"][~keep].tolist(), cols["path"][~keep].tolist()
    for method, path in zip(methods, paths, strict=True):
        name = call_name(method, path)
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


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


def summarize(cols: Columns, buckets: Sequence[int] = DEFAULT_BUCKETS) -> StatsSummary:
    """The ``stats --json`` object for ``cols`` (loaded with STATS_FIELDS and STATS_PRESENCE)."""
    n = cols.n
    start = cols["start_ns"]
    duration_s = float(start[-1] - start[0]) / 1e9 if n >= 2 else 0.0
    rate_rps = (n - 1) / duration_s if duration_s > 0 else None
    keep = generations(cols)
    reqs = requests(cols)
    cut = (cols["error"] == "cancelled")[keep]
    ok = np.zeros(n, dtype=bool)
    ok[keep] = ~reqs.error
    has = cols.present
    values = metric_values(reqs)
    due, content = values.get("latency_from_due"), values.get("ttft_content")
    return {
        "records": n,
        "shed": int(has["shed"].sum()),
        "duration_s": duration_s,
        "rate_rps": rate_rps,
        "clock": _clock(start),
        "idle_calls": idle_calls(cols, keep),
        "shadow_copies": cols.shadow_copies,
        "error_rate": _error_rate(reqs.error, cut),
        "cancelled": int(cut.sum()),
        "latency_ms": percentiles(values["latency"]),
        "latency_from_due_ms": percentiles(due) if due is not None else None,
        "ttft_ms": percentiles(values["ttft"]),
        "ttft_content_ms": percentiles(content) if content is not None else None,
        "tpot_ms": percentiles(values["tpot"]),
        "input_tokens": percentiles(cols["input_tokens"][ok & has["input_tokens"]]),
        "output_tokens": percentiles(cols["output_tokens"][ok & has["output_tokens"]]),
        "buckets": _buckets(cols, keep, (reqs, cut), buckets, rate_rps),
    }


def _error_rate(failed: npt.NDArray[np.bool_], cut: npt.NDArray[np.bool_]) -> float | None:
    """Failures but those the client cut (Ctrl-C, ``--slo-stop``), over the requests not
    cut: the target's error rate, as ``report`` counts it."""
    judged = int((~cut).sum())
    return float((failed & ~cut).sum()) / judged if judged else None


def _clock(start_ns: Any) -> ClockSummary:
    """The clock the start times were logged on (``traces.workload.clock``)."""
    clock = detect(start_ns)
    return {
        "tick_s": clock.tick_s,
        "tie_share": clock.tie_share,
        "jitter_s": clock.jitter_s,
        "described": clock.describe(),
    }


def _buckets(
    cols: Columns,
    keep: npt.NDArray[np.bool_],
    reqs: tuple[Requests, npt.NDArray[np.bool_]],
    edges: Sequence[int],
    rate_rps: float | None,
) -> list[BucketStats]:
    """Per input-length bucket, over the generations (``keep``: their requests and which
    the client cut); each bucket's rate is its share of every record's."""
    tokens = cols["input_tokens"][keep]
    has_tokens = cols.present["input_tokens"][keep]
    rate = rate_rps / cols.n if rate_rps is not None else None
    rows = []
    for lo, hi in bucket_bounds(edges):
        sel = has_tokens.copy()
        if lo is not None:
            sel &= tokens >= lo
        if hi is not None:
            sel &= tokens < hi
        rows.append(_bucket_row(bucket_label(lo, hi), sel, reqs, rate))
    if not has_tokens.all():
        rows.append(_bucket_row("unknown", ~has_tokens, reqs, rate))
    return rows


def _bucket_row(
    label: str,
    sel: npt.NDArray[np.bool_],
    reqs: tuple[Requests, npt.NDArray[np.bool_]],
    rate_each: float | None,
) -> BucketStats:
    count = int(sel.sum())
    requests, cut = reqs
    return {
        "range": label,
        "count": count,
        "latency_ms": percentiles(metric_values(requests, sel)["latency"], BUCKET_PERCENTILES),
        "rate_rps": rate_each * count if rate_each is not None else None,
        "error_rate": _error_rate(requests.error[sel], cut[sel]),
    }
