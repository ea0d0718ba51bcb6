"""Which API route each request of a report counts in: the selections behind the
report's per-route rows, as ``compare._bucket_masks`` is behind its input-length rows.

A route is ``tailreplay.dialects.route_label`` of the request's path: a route a
dialect serves (``/v1/chat/completions``, ``/v1/messages``, ...), ``/v1/models``, or
``other``; a bounded set however many paths clients sent. A replayed request counts
in its recorded original's route (joined on trace and span id), so both columns of
a row hold the same requests; one without an original, in its own path's.

``route_tables`` renders the rows: per route and side, requests, error rate, latency
and TTFT P50/P99, beside the report's table by input length.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.dialects import ROUTES, route_label
from tailreplay.report.model import Report, SideName, is_replay, side_items, side_label
from tailreplay.report.side import Side
from tailreplay.report.table import ReportTable, ms, pct, quantile_value

__all__ = ["route_masks", "route_tables"]

Array = npt.NDArray[Any]
Mask = npt.NDArray[np.bool_]

_INDEX = {route: i for i, route in enumerate(ROUTES)}
_OTHER = _INDEX["other"]


def _routes(side: Side) -> Array:
    """Per request, its route's index in ``ROUTES``. Each distinct path is labelled
    once (``labels["path"]``), not each request; a request without a path is other."""
    table = [_INDEX[route_label(path)] for path in side.labels.get("path", [])]
    return np.array([*table, _OTHER], dtype=np.int64)[side.path]  # -1 picks the last


def route_masks(
    recorded: Side | None, replayed: Side, joined: Array | None
) -> list[tuple[str, dict[SideName, Mask]]]:
    """(route, {side: mask}) per route either side has, most requests (both sides
    together) first; ``joined`` is ``deltas.join``'s (None without a recorded side)."""
    codes: dict[SideName, Array] = {"replayed": _routes(replayed)}
    if recorded is not None and joined is not None:
        own = _routes(recorded)
        matched = joined >= 0
        codes["replayed"][matched] = own[joined[matched]]
        codes = {"recorded": own, "replayed": codes["replayed"]}
    counts = np.zeros(len(ROUTES), dtype=np.int64)
    for c in codes.values():
        counts += np.bincount(c, minlength=len(ROUTES))
    # Ties keep ROUTES' order, so the rows of a run come out the same every time.
    present = sorted(np.flatnonzero(counts), key=lambda i: -int(counts[i]))
    return [(ROUTES[i], {name: c == i for name, c in codes.items()}) for i in present]


_COLUMNS = [
    "route",
    "side",
    "requests",
    "errors",
    "latency P50 ms",
    "latency P99 ms",
    "TTFT P50 ms",
    "TTFT P99 ms",
]


def route_tables(report: Report) -> list[ReportTable]:
    """The table of ``report["routes"]``; none for one route, whose row would repeat the
    overview (the JSON keeps it)."""
    if len(report["routes"]) < 2:
        return []
    note = "route: the request's path when a dialect serves it (or /v1/models), else other"
    if is_replay(report):
        note += "; a replayed request counts in the route of its recorded original"
    t = ReportTable("By route", list(_COLUMNS), note=note)
    for row in report["routes"]:
        for n, (side, s) in enumerate(side_items(row)):
            lat, ttft = s["metrics"].get("latency"), s["metrics"].get("ttft")
            t.rows.append(
                [
                    row["route"] if n == 0 else "",
                    side_label(report, side),
                    f"{s['requests']:,}",
                    pct(s["error_rate"]),
                    *(ms(quantile_value(lat, q)) for q in ("p50", "p99")),
                    *(ms(quantile_value(ttft, q)) for q in ("p50", "p99")),
                ]
            )
    return [t]
