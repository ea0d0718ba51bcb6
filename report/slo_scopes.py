"""SLOs per class and per window: ``--slo-by model|path|session|phase``, ``--slo-window 1m``.

The overall SLO matrix (``slo.py``) judges the whole run. A run can pass overall
while one model misses its P99 or one minute of it falls over; these scopes judge
each class, or each window of replay time, on its own:

- **by class**: the replayed requests of each value of the field (a relative
  objective, ``1.2x``, compares with the recorded requests of the same class, or
  all of them when the recording has no such field, as for ``phase``);
- **by window**: consecutive windows of the replay's send time; a window holding
  fewer than ``MIN_REQUESTS`` requests is shown but not judged, and the spread
  (lowest and highest value of each objective across judged windows) is reported.

A scope passes when every objective is met in every judged class or window (and
at least one was judged); the
run's SLO then passes only if the overall matrix and every scope pass. Each row
also has its goodput: the share of its requests that succeeded and met every
absolute per-request limit (latency ≤ 800 ms, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailreplay.errors import UsageError
from tailreplay.report.compare import summarize
from tailreplay.report.model import PerSide, ScopeRow, SideSummary, SloScope
from tailreplay.report.side import Side
from tailreplay.report.slo import Objective, cell
from tailreplay.traces.results.figures import per_request
from tailreplay.units import CLOCK_END_NS, format_duration

__all__ = ["MIN_REQUESTS", "by_class", "by_window", "goodput"]

MIN_REQUESTS = 20
CLASS_FIELDS = ("model", "path", "session", "phase")

Mask = npt.NDArray[np.bool_]


def goodput(side: Side, sel: Mask, objectives: Sequence[Objective]) -> float | None:
    """Share of the selected requests that succeeded with every per-request figure an
    absolute objective limits within that limit (a figure a request lacks is met)."""
    if not sel.any():
        return None
    figures = per_request(side.requests)
    good = sel & side.ok
    for obj in objectives:
        values = figures.get(obj.metric) if obj.metric != "error_rate" else None
        if values is not None and not obj.relative:
            good &= ~(values > obj.limit)  # NaN compares False: an absent figure is met
    return float(good.sum() / sel.sum())


def by_class(
    objectives: Sequence[Objective], recorded: Side | None, replayed: Side, field: str, seed: int
) -> SloScope:
    """Every class of ``field`` (model, path, session or phase) judged on its own."""
    rng = np.random.default_rng(seed)
    rows: list[ScopeRow] = []
    codes = getattr(replayed, field)
    for i, label in enumerate(replayed.labels.get(field, [])):
        sides: PerSide[SideSummary] = {
            "replayed": summarize(replayed, codes == i, None, rng, itl=False)
        }
        if recorded is not None:
            sides["recorded"] = summarize(
                recorded, _same_class(recorded, field, label), None, rng, itl=False
            )
        rows.append(_row(f"{field}={label}", sides, objectives, replayed, codes == i, judged=True))
    scope = _scope(f"by {field}", rows, objectives)
    if not rows:
        # Not a pass (an empty scope must not pass CI), and not "none of 0 had 20".
        scope["failed"] = [f"no request has a {field}" + _WHERE.get(field, "")]
    return scope


_WHERE = {"phase": " (phases are the steps or pulses of a replay's --speed)"}


MOST_WINDOWS = 10_000
"""Windows ``--slo-window`` may cut a replay into: each is a row of every output."""


def by_window(
    objectives: Sequence[Objective],
    recorded: Side | None,
    replayed: Side,
    window_s: float,
    seed: int,
) -> SloScope:
    """Every ``window_s`` of the replay's send time judged on its own."""
    rng = np.random.default_rng(seed)
    has = replayed.start_ns >= 0
    rows: list[ScopeRow] = []
    if has.any():
        t0 = int(replayed.start_ns[has].min())
        span_ns = int(replayed.start_ns[has].max()) - t0
        # At most the clock's span: a window of 99999999h is one window, not an overflow.
        window_ns = max(min(round(window_s * 1e9), CLOCK_END_NS), 1)
        if span_ns // window_ns >= MOST_WINDOWS:
            raise UsageError(
                f"--slo-window {format_duration(window_s)} makes over {MOST_WINDOWS:,} "
                f"windows of the replay's {format_duration(span_ns / 1e9)}; give at least "
                f"{format_duration(span_ns / 1e9 / MOST_WINDOWS)}"
            )
        index = np.where(has, (replayed.start_ns - t0) // window_ns, -1)
        base = None
        if recorded is not None:
            base = summarize(recorded, np.ones(recorded.n, dtype=bool), None, rng, itl=False)
        for k in range(int(index.max()) + 1):
            sel = index == k
            sides: PerSide[SideSummary] = {
                "replayed": summarize(replayed, sel, window_s, rng, itl=False)
            }
            if base is not None:
                sides["recorded"] = base
            name = f"{k * window_s:g}-{(k + 1) * window_s:g} s"
            rows.append(
                _row(name, sides, objectives, replayed, sel, judged=int(sel.sum()) >= MIN_REQUESTS)
            )
    return _scope(f"per {window_s:g} s window", rows, objectives)


def _same_class(recorded: Side, field: str, label: str) -> Mask:
    """The recorded requests of class ``label``; all of them when the recording does
    not have the field (a replay's phase) or not this value of it."""
    labels = recorded.labels.get(field, [])
    if label not in labels:
        return np.ones(recorded.n, dtype=bool)
    mask: Mask = getattr(recorded, field) == labels.index(label)
    return mask


def _row(
    name: str,
    sides: PerSide[SideSummary],
    objectives: Sequence[Objective],
    replayed: Side,
    sel: Mask,
    *,
    judged: bool,
) -> ScopeRow:
    cells = {o.text: cell(o, sides) for o in objectives}
    oks = [c["ok"] for c in cells.values()]
    passed = (all(ok is True for ok in oks)) if judged else None
    share = goodput(replayed, sel, objectives)
    return {
        "scope": name,
        "requests": int(sel.sum()),
        "goodput": share,
        "cells": cells,
        "passed": passed,
    }


def _scope(name: str, rows: list[ScopeRow], objectives: Sequence[Objective]) -> SloScope:
    spread: dict[str, list[float]] = {}
    for obj in objectives:
        values = [r["cells"][obj.text]["value"] for r in rows if r["passed"] is not None]
        known = [v for v in values if v is not None]
        if known:
            spread[obj.text] = [min(known), max(known)]
    failed = [r["scope"] for r in rows if r["passed"] is False]
    if not any(r["passed"] is not None for r in rows):
        # Nothing judged is not a pass (an empty scope must not pass CI).
        failed = [f"none of {len(rows)} had {MIN_REQUESTS} requests to judge"]
    return {"name": name, "rows": rows, "passed": not failed, "failed": failed, "spread": spread}
