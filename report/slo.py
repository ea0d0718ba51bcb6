"""Service-level objectives: parsed from the command line, checked against a report.

An objective is ``METRIC:QUANTILE<=LIMIT[*WEIGHT]`` or ``error_rate<=PERCENT[*WEIGHT]``;
a limit always has its unit (``ms``, ``s``, ``x``, ``%``): a bare number is refused.

- ``latency:p99<=800ms*10`` — the replayed P99 latency at most 800 ms, weight 10;
- ``ttft:p95<=1.2x`` — at most 1.2 times the recorded P95 TTFT (a regression gate);
- ``error_rate<=1%``.

The matrix checks every objective overall and in every input-length bucket. The
score is the weight of the objectives met overall over the weight of them all; the
run passes when the score reaches ``min_score`` (default 1: every objective met).
Bucket cells are shown, not scored: a bucket of three requests should not fail CI.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeGuard

from tailreplay.declared import Choice, Setting
from tailreplay.errors import UsageError
from tailreplay.option_values import DURATION_ABOVE_0
from tailreplay.report.model import (
    METRICS,
    Metric,
    PerSide,
    Report,
    SideSummary,
    SloCell,
    SloMatrix,
    SloRow,
)
from tailreplay.report.quantiles import QUANTILES
from tailreplay.units import parse_duration

__all__ = [
    "SLO",
    "SLO_BY",
    "SLO_MIN_SCORE",
    "SLO_WINDOW",
    "Objective",
    "cell",
    "check",
    "check_judgeable",
    "parse_objectives",
]

_SPEC = re.compile(
    r"^\s*(?P<metric>[a-z_]+)(?::(?P<q>p\d+))?\s*<=\s*(?P<limit>[^*\s]+)"
    r"\s*(?:\*\s*(?P<weight>\d+(?:\.\d*)?))?\s*$"
)
_EXAMPLE = "e.g. latency:p99<=800ms*10, ttft:p95<=1.2x, error_rate<=1%"
_BARE = re.compile(r"^[0-9.]+$")
"""A limit without a unit: refused (seconds or milliseconds? a fraction or percent?)."""


@dataclass(frozen=True, slots=True)
class Objective:
    text: str
    metric: Metric | Literal["error_rate"]
    quantile: str | None
    """None for error_rate."""
    limit: float
    """Milliseconds, a share (error_rate), or a factor of the recorded value."""
    relative: bool
    weight: float


def parse_objectives(specs: Sequence[str]) -> list[Objective]:
    """Objectives from ``--slo`` values (each may hold several, comma-separated)."""
    out = []
    for spec in specs:
        for part in spec.split(","):
            if part.strip():
                out.append(_parse(part.strip()))
    return out


def _rate_hint(limit: str) -> str:
    """The fix for an error rate given without '%': a number under 1 most likely meant
    a share (0.01 is 1%), so both readings are offered."""
    hint = "give the error rate in percent, e.g. "
    try:
        value = float(limit)
    except ValueError:
        return f"{hint}error_rate<=1%"
    if 0 < value < 1:
        return (
            f"{hint}error_rate<={value * 100:g}% for a share of {limit}, or "
            f"error_rate<={limit}% (a bare number is ambiguous)"
        )
    return f"{hint}error_rate<={limit}% (a bare number is ambiguous: 1 could be 1% or 100%)"


def _parse(text: str) -> Objective:
    m = _SPEC.match(text)
    if m is None:
        raise UsageError(f"invalid --slo {text!r}: {_EXAMPLE}")
    metric, q, limit_text = m["metric"], m["q"], m["limit"].lower()
    weight = float(m["weight"]) if m["weight"] else 1.0
    if weight <= 0:
        raise UsageError(f"invalid --slo {text!r}: the weight must be positive")
    if metric == "error_rate":
        if q is not None:
            raise UsageError(f"invalid --slo {text!r}: error_rate takes no percentile")
        if not limit_text.endswith("%"):
            raise UsageError(f"invalid --slo {text!r}: {_rate_hint(limit_text)}")
        share = _number(text, limit_text.removesuffix("%"))
        if share > 100:
            raise UsageError(f"invalid --slo {text!r}: an error rate is at most 100%")
        return Objective(text, "error_rate", None, share / 100, False, weight)
    if not _is_metric(metric):
        raise UsageError(
            f"invalid --slo {text!r}: unknown metric {metric!r} "
            f"(one of {', '.join((*METRICS, 'error_rate'))})"
        )
    if q is None or q not in QUANTILES:
        raise UsageError(
            f"invalid --slo {text!r}: name a percentile ({', '.join(QUANTILES)}), {_EXAMPLE}"
        )
    if limit_text.endswith("x"):
        return Objective(text, metric, q, _number(text, limit_text[:-1]), True, weight)
    if _BARE.match(limit_text):
        raise UsageError(
            f"invalid --slo {text!r}: give the limit a unit ({limit_text}ms or {limit_text}s) "
            f"or make it relative ({limit_text}x: to the recording, or to production "
            "in report --shadow)"
        )
    try:
        seconds = parse_duration(limit_text)
    except UsageError:
        raise UsageError(
            f"invalid --slo {text!r}: the limit is a duration or a factor like 1.2x; {_EXAMPLE}"
        ) from None
    return Objective(text, metric, q, seconds * 1000, False, weight)


# The recorded field without which a metric has no recorded value to be relative to.
_RECORDED_BY: dict[str, str] = {
    "latency": "duration_ns",
    "ttft": "ttfb_ns",
    "ttft_content": "ttft_content_ns",
    "ttst": "chunk_gaps_us",
    "tpot": "ttfb_ns",
    "itl": "chunk_gaps_us",
}


def check_judgeable(
    objectives: Sequence[Objective],
    archives: Sequence[Path],
    *,
    skip_corrupt: bool = False,
    baseline: str = "the recording",
) -> None:
    """Refuse, before a replay, relative objectives its recording cannot judge.

    ``ttft:p99<=1.2x`` needs recorded TTFTs: on an archive without any (imported
    token counts, say) it could only fail after the whole run. A ``UsageError``
    (exit 2) names what the archive lacks and what to use instead.
    """
    relative = [o for o in objectives if o.relative and o.metric != "error_rate"]
    if not relative:
        return
    for obj in relative:
        if obj.metric == "latency_from_due":
            raise UsageError(
                f"--slo {obj.text!r}: latency_from_due exists only in a replay; "
                "give it an absolute limit (e.g. 800ms)"
            )
    from tailreplay.traces.archive.columns import load_columns

    fields = sorted({_RECORDED_BY[o.metric] for o in relative})
    cols = load_columns(archives, [], presence_only=fields, skip_corrupt=skip_corrupt)
    for obj in relative:
        field = _RECORDED_BY[obj.metric]
        if not cols.present[field].any():
            raise UsageError(
                f"--slo {obj.text!r}: relative to {baseline}, but the archive records no "
                f"{obj.metric} ({field} is absent from all {len(cols.present[field]):,} records); "
                "give an absolute limit instead (e.g. 800ms)"
            )


def _is_metric(name: str) -> TypeGuard[Metric]:
    return name in METRICS


def _number(text: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"invalid --slo {text!r}: {_EXAMPLE}") from None
    if number < 0:
        raise UsageError(f"invalid --slo {text!r}: the limit must not be negative")
    return number


def check(objectives: Sequence[Objective], report: Report, min_score: float = 1.0) -> SloMatrix:
    """The SLO matrix of ``report``: one row per objective, a cell per column."""
    columns: list[tuple[str, PerSide[SideSummary]]] = [("overall", report["overall"])]
    columns += [(row["range"], row) for row in report["buckets"]]
    rows: list[SloRow] = []
    met = 0.0
    for obj in objectives:
        cells = {label: cell(obj, sides) for label, sides in columns}
        rows.append({"objective": obj.text, "weight": obj.weight, "cells": cells})
        met += obj.weight if cells["overall"]["ok"] else 0.0
    total = sum(obj.weight for obj in objectives)
    score = met / total if total else None
    return {
        "columns": [label for label, _ in columns],
        "rows": rows,
        "score": score,
        "min_score": min_score,
        "passed": score is None or score >= min_score,
    }


def cell(obj: Objective, sides: PerSide[SideSummary]) -> SloCell:
    """value/limit/ok for one objective on one column; ok is None when nothing to judge."""
    replayed = sides["replayed"]
    if obj.metric == "error_rate":
        value = replayed["error_rate"]
        limit: float | None = obj.limit
    else:
        value = _quantile(replayed, obj.metric, obj.quantile)
        limit = obj.limit
        if obj.relative:
            recorded = sides.get("recorded")
            base = None if recorded is None else _quantile(recorded, obj.metric, obj.quantile)
            limit = None if base is None else base * obj.limit
    if value is None or limit is None:
        # No data counts as missed overall (an empty replay must not pass CI).
        return {"value": value, "limit": limit, "ok": None}
    return {"value": value, "limit": limit, "ok": bool(value <= limit)}


def _quantile(side: SideSummary, metric: Metric, quantile: str | None) -> float | None:
    per_q = side["metrics"].get(metric)
    if not per_q or quantile not in per_q:
        return None
    return per_q[quantile]["value"]


# The SLO options of every command that judges a run (``replay``, ``report``), each
# declared once (``tailreplay/declared.py``).

SLO: Setting[None] = Setting(
    "--slo",
    None,
    "Objective METRIC:PCT<=LIMIT[*WEIGHT] (repeatable, or comma-separated), e.g. "
    "latency:p99<=800ms*10, ttft:p95<=1.2x (of the recorded), error_rate<=1%.",
    multiple=True,
    finish=parse_objectives,
)
SLO_MIN_SCORE: Setting[float] = Setting(
    "--slo-min-score",
    1.0,
    "Weighted share of the objectives that must be met; below it the exit code is 1.",
    low=0,
    high=1,
    show_default=True,
)
SLO_WINDOW: Setting[None] = Setting(
    "--slo-window",
    None,
    "Also judge every objective in each window this long (e.g. 1m) of the replay: "
    "every window with 20 requests or more must meet them.",
    kind=DURATION_ABOVE_0,
)
SLO_BY: Setting[None] = Setting(
    "--slo-by",
    None,
    "Also judge every objective per model, path, session or load phase: each class must meet them.",
    kind=Choice(("model", "path", "session", "phase")),
)
