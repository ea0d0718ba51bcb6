"""Which records a replay can send again, and which it must leave out: a POST to a
route no dialect serves, captured without its body, would go out empty and measure
nothing the recording did."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailreplay.dialects import dialect_for
from tailreplay.traces.archive.columns import load_columns

__all__ = ["UNBUILDABLE", "rebuildable", "unbuildable"]

UNBUILDABLE = "POSTs to routes no dialect serves, captured without their bodies"
"""How the records ``rebuildable`` refuses are named in messages."""


def rebuildable(method: str | None, path: str | None, has_body: bool) -> bool:
    """Whether a record can be sent again: with its body, as recorded; without one, as a
    synthetic request of its dialect, or as a call without a body (``GET /v1/models``).
    A POST to a route no dialect serves, kept without its body, cannot: sending it
    empty would measure nothing the recording did."""
    if has_body or (method or "POST").upper() != "POST":
        return True
    return path is None or dialect_for(path) is not None


def unbuildable(
    paths: Sequence[str | os.PathLike[str]], skip_corrupt: bool, per_file: Sequence[int]
) -> npt.NDArray[np.bool_] | None:
    """The records of ``paths`` (the first ``per_file`` of each) that ``rebuildable``
    refuses, as a mask; None when there are none."""
    cols = load_columns(
        paths,
        ["path", "method"],
        presence_only=["req_body"],
        skip_corrupt=skip_corrupt,
        limits=per_file,
    )
    targets, methods = cols["path"], cols["method"]
    has_path, has_method, has_body = (cols.present[n] for n in ("path", "method", "req_body"))
    posts = ~has_method | (methods == "POST")
    candidates = np.flatnonzero(posts & has_path & ~has_body)
    if candidates.size == 0:
        return None
    unknown = {p for p in set(targets[candidates]) if dialect_for(p) is None}
    if not unknown:
        return None
    refused = np.zeros(len(targets), dtype=bool)
    refused[candidates] = [p in unknown for p in targets[candidates]]
    return refused if refused.any() else None
