"""Which API route each request of a report counts in: the selections behind the
report's per-route rows, as ``compare._bucket_masks`` is behind its input-length rows.

A route is ``tailreplay.dialects.route_label`` of the request's path: a route a
dialect serves (``/v1/chat/completions``, ``/v1/messages``, ...), ``/v1/models``, or
``other``; a bounded set however many paths clients sent. A replayed request counts
in its recorded original's route (joined on trace and span id), so both columns of
a row hold the same requests; one without an original, in its own path's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.dialects import ROUTES, route_label
from tailreplay.report.model import SideName
from tailreplay.report.side import Side

__all__ = ["route_masks"]

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
