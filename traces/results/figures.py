"""The one definition of every per-request figure tailreplay reports.

``traces stats``, the replay's summary, ``report`` and its SLOs all compute their
figures here, from the same per-request columns, so the same records give the
same numbers in every view. Figures are in milliseconds, over successful
requests only (errors have their own rate):

- ``latency``: arrival (a capture) or send (a replay) to the last byte delivered;
- ``latency_from_due``: a replay's due time to the last byte, i.e. ``latency``
  plus the dispatch lag: what a user arriving on schedule felt (free of
  coordinated omission). Only results of a replay have it;
- ``ttft``: streamed requests only, to the first token event of any kind (for a
  response that is not streamed the first byte is the whole answer);
- ``ttft_content``: streamed requests, to the first answer token: later than
  ``ttft`` when a reasoning model thought first, the same otherwise;
- ``ttst``: streamed requests with a second token event, to it (TTFT plus the first
  inter-token gap): the first token may come from a prefill alone, the second
  needs a decode step in the running batch;
- ``tpot``: streamed requests with more than one output token:
  (latency - TTFT) / (output tokens - 1); none where a record's TTFT comes after its
  end (a log's quirk, or a hand-made record): never a negative time;
- ``itl`` (gaps, not per request): the gaps between a streamed response's token
  events, as recorded in ``chunk_gaps_us`` (tailreplay/http/sse.py says how).

A request failed when ``error`` is set, or its status is 0 (no response) or 400
and above (``is_error``, and ``error_mask`` over columns); an absent or nil value
is the same. Percentiles are numpy's default (linear interpolation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "METRICS",
    "PERCENTILES",
    "Metric",
    "Requests",
    "error_mask",
    "is_error",
    "metric_values",
    "per_request",
    "percentiles",
]

Metric = Literal["latency", "latency_from_due", "ttft", "ttft_content", "ttst", "tpot", "itl"]
METRICS: tuple[Metric, ...] = (
    "latency",
    "latency_from_due",
    "ttft",
    "ttft_content",
    "ttst",
    "tpot",
    "itl",
)
"""Every figure a view (and an SLO) can name; ``itl`` is over gaps, the rest per request."""

PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
"""The percentiles every view shows."""

Array = npt.NDArray[Any]
Mask = npt.NDArray[np.bool_]
_MS = 1e-6


def is_error(status: int | None, error: str | None) -> bool:
    """A failed exchange: a transport or response error, no response (0), or HTTP 4xx/5xx."""
    if error is not None:
        return True
    return status is not None and (status == 0 or status >= 400)


def error_mask(status: Array, has_error: Mask) -> Mask:
    """``is_error`` over columns: ``status`` is -1 where absent."""
    mask: Mask = has_error | (status == 0) | (status >= 400)
    return mask


@dataclass(frozen=True)
class Requests:
    """Per-request columns, one entry per request: int64 arrays (ns, tokens) with -1 where
    a value is absent, and two bool arrays."""

    duration_ns: Array
    ttfb_ns: Array
    ttft_content_ns: Array
    lag_ns: Array
    output_tokens: Array
    stream: Mask
    error: Mask
    ttst_ns: Array | None = None
    """Arrival to the second token event, -1 where there was none; None: not read
    (``traces stats`` reads columns, which hold no first gap)."""

    @property
    def n(self) -> int:
        return int(self.duration_ns.size)


def metric_values(r: Requests, sel: Mask | None = None) -> dict[Metric, Array]:
    """Each per-request figure (ms) over the successful requests of ``sel`` (default all).

    A figure with nothing to measure is an empty array; ``latency_from_due`` is left
    out when no request has a lag (the records are not a replay's results), and
    ``ttft_content`` when no answer came after reasoning.
    """
    keep = np.ones(r.n, dtype=bool) if sel is None else sel
    return {name: col[keep & ~np.isnan(col)] for name, col in per_request(r).items()}


def per_request(r: Requests) -> dict[Metric, Array]:
    """Each per-request figure (ms), one entry per request, NaN where the request has
    none (a failure, a figure it does not have); keys as ``metric_values``."""
    ok = ~r.error
    dur, ttfb = r.duration_ns, r.ttfb_ns
    has_dur = ok & (dur >= 0)
    streamed = ok & r.stream & (ttfb >= 0)
    content = np.where(r.ttft_content_ns >= 0, r.ttft_content_ns, ttfb)
    tpot_sel = streamed & has_dur & (r.output_tokens > 1) & (dur >= ttfb)
    tokens = np.maximum(r.output_tokens - 1, 1)

    def where(mask: Mask, values: Array) -> Array:
        return np.where(mask, values * _MS, np.nan)

    out: dict[Metric, Array] = {
        "latency": where(has_dur, dur),
        "ttft": where(streamed, ttfb),
        "tpot": where(tpot_sel, (dur - ttfb) / tokens),
    }
    if bool((r.ttft_content_ns >= 0).any()):
        out["ttft_content"] = where(streamed, content)
    if bool((r.lag_ns >= 0).any()):
        out["latency_from_due"] = where(has_dur & (r.lag_ns >= 0), dur + r.lag_ns)
    if r.ttst_ns is not None and bool((r.ttst_ns >= 0).any()):
        out["ttst"] = where(streamed & (r.ttst_ns >= 0), r.ttst_ns)
    return out


def percentiles(values: Array, which: Mapping[str, float] = PERCENTILES) -> dict[str, float] | None:
    """Named percentiles of ``values``, or None when there are none.

    >>> percentiles(np.array([1.0, 2.0, 3.0]), {"p50": 50.0})
    {'p50': 2.0}
    """
    if values.size == 0:
        return None
    qs = np.percentile(values.astype(np.float64), list(which.values()))
    return {name: float(q) for name, q in zip(which, qs, strict=True)}
