"""Replayed against recorded, request by request: each replayed request joined to its
recorded original by trace id, the percentiles of the differences, the largest
slow-downs (with and without the tail-stretched requests, and over the pairs whose
answers are as long), and the ``--deltas`` CSV rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.printable import printable
from tailreplay.report.model import DeltaFigures, Deltas, SlowDown
from tailreplay.report.quantiles import QUANTILES
from tailreplay.report.side import Side
from tailreplay.traces.results.figures import percentiles

__all__ = ["DELTA_COLUMNS", "WORST", "delta_rows", "deltas", "join"]

Array = npt.NDArray[Any]
WORST = 10


def join(recorded: Side, replayed: Side) -> Array:
    """For each replayed request, the index of its recorded original (the last, when a
    key repeats), or -1."""
    return recorded.key_index().find(replayed.key, replayed.keyed)


def deltas(recorded: Side, replayed: Side, join: Array) -> Deltas:
    """Replayed minus recorded, request by request, for the pairs that both succeeded;
    again without the tail-stretched requests when there were some."""
    matched = join >= 0
    both = matched.copy()
    both[matched] &= recorded.ok[join[matched]] & (recorded.duration_ns[join[matched]] >= 0)
    both &= replayed.ok & (replayed.duration_ns >= 0)
    figures = _delta_figures(recorded, replayed, join, np.flatnonzero(both))
    out: Deltas = {
        "joined": int(matched.sum()),
        "unmatched": int((~matched).sum()),
        "compared": figures["compared"],
        "latency_delta_ms": figures["latency_delta_ms"],
        "latency_ratio": figures["latency_ratio"],
        "slower_share": figures["slower_share"],
        "worst": figures["worst"],
    }
    if bool((both & replayed.tail).any()):
        untailed = np.flatnonzero(both & ~replayed.tail)
        out["without_tail"] = _delta_figures(recorded, replayed, join, untailed)
    plain = both & ~replayed.tail
    lengths = np.full(replayed.n, -1, dtype=np.int64)
    lengths[matched] = recorded.output_tokens[join[matched]]
    known = plain & (lengths >= 0) & (replayed.output_tokens >= 0)
    if bool((known & (lengths != replayed.output_tokens)).any()):
        same = np.flatnonzero(known & (lengths == replayed.output_tokens))
        out["same_length"] = _delta_figures(recorded, replayed, join, same)
    return out


def _delta_figures(recorded: Side, replayed: Side, join: Array, idx: Array) -> DeltaFigures:
    """The delta and ratio percentiles and the largest slow-downs over pairs ``idx``."""
    rec = recorded.duration_ns[join[idx]] * 1e-6
    rep = replayed.duration_ns[idx] * 1e-6
    delta = rep - rec
    worst = idx[np.argsort(-delta)[:WORST]] if idx.size else idx
    rows: list[SlowDown] = []
    for i in worst:
        j = int(join[i])
        key = replayed.key_of(int(i)) or b""
        rows.append(
            {
                "trace_id": key[:16].hex(),
                "span_id": key[16:].hex(),
                "input_tokens": int(recorded.input_tokens[j]),
                "recorded_ms": float(recorded.duration_ns[j]) * 1e-6,
                "replayed_ms": float(replayed.duration_ns[i]) * 1e-6,
                "tail": bool(replayed.tail[i]),
            }
        )
    ratio = rep / np.where(rec > 0, rec, np.nan)
    return {
        "compared": int(idx.size),
        "latency_delta_ms": percentiles(delta, QUANTILES),
        "latency_ratio": percentiles(ratio[np.isfinite(ratio)], QUANTILES),
        "slower_share": float((delta > 0).mean()) if idx.size else None,
        "worst": rows,
    }


DELTA_COLUMNS = (
    "trace_id",
    "span_id",
    "path",
    "model",
    "input_tokens",
    "recorded_ms",
    "replayed_ms",
    "delta_ms",
    "recorded_ttft_ms",
    "replayed_ttft_ms",
    "recorded_output_tokens",
    "replayed_output_tokens",
    "tail",
    "replayed_error",
    "replayed_cancelled",
)


def delta_rows(recorded: Side, replayed: Side) -> Iterator[tuple[str | int, ...]]:
    """One row per replayed request with a recorded original (DELTA_COLUMNS); the path
    (without its query) and model are the original's, empty where it has none or the
    side was loaded without them (``load_side``'s ``classes``)."""
    joined = join(recorded, replayed)
    # Escaped once per distinct value; index -1 (no value) picks the appended "".
    paths = [*map(_csv_text, recorded.labels.get("path", [])), ""]
    models = [*map(_csv_text, recorded.labels.get("model", [])), ""]

    def ms(ns: int) -> str:
        return "" if ns < 0 else f"{ns / 1e6:.3f}"

    for i in np.flatnonzero(joined >= 0):
        j = int(joined[i])
        key = replayed.key_of(int(i)) or b""
        # A request the client cut is neither the target's error nor in any figure:
        # its time is only how long it had been in flight.
        cut = bool(replayed.cancelled[i])
        rec, rep = int(recorded.duration_ns[j]), -1 if cut else int(replayed.duration_ns[i])
        both = rec >= 0 and rep >= 0 and bool(recorded.ok[j]) and bool(replayed.ok[i])
        yield (
            key[:16].hex(),
            key[16:].hex(),
            paths[recorded.path[j]],
            models[recorded.model[j]],
            int(recorded.input_tokens[j]),
            ms(rec),
            ms(rep),
            f"{(rep - rec) / 1e6:.3f}" if both else "",
            # TTFT is a streamed answer's, as in the report's tables.
            ms(int(recorded.ttfb_ns[j])) if recorded.stream[j] else "",
            ms(int(replayed.ttfb_ns[i])) if replayed.stream[i] else "",
            _tokens(int(recorded.output_tokens[j])),
            _tokens(int(replayed.output_tokens[i])),
            int(replayed.tail[i]),
            int(replayed.error[i] and not cut),
            int(cut),
        )


def _tokens(n: int) -> str:
    """A count as the CSV writes it: empty where the record has none (-1)."""
    return "" if n < 0 else str(n)


_FORMULA = frozenset("=+-@")
"""A cell's first characters that a spreadsheet reads as the start of a formula."""


def _csv_text(text: str) -> str:
    """Text from a client (a path, a model name) as a CSV cell is safe to open: control
    characters escaped (``printable``: a newline cannot end the row, in any reader) and a
    leading ``=``, ``+``, ``-`` or ``@`` behind a ``'``, so a spreadsheet shows the text
    instead of running it as a formula (``=HYPERLINK(...)``). Commas and quotes are
    the ``csv`` writer's to quote."""
    text = printable(text)
    return "'" + text if text[:1] in _FORMULA else text
