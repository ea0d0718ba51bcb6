"""One titled table of strings, and how its numbers read: what ``tables.py`` builds
and the terminal, Markdown and HTML renderers lay out."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailreplay.report.model import Percentiles

__all__ = ["ReportTable", "ms", "num", "pct", "quantile_value"]


@dataclass
class ReportTable:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""
    wide: bool = False
    """Too wide for a terminal or a PR comment: only the HTML page shows it."""


def num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def ms(x: float | None) -> str:
    """Milliseconds to three significant figures or so: 0.42, 38.5, 983, 7,480."""
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if abs(x) >= 1 else f"{x:.2f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.2f}%"


def quantile_value(per_q: Percentiles | None, q: str) -> float | None:
    """The value of percentile ``q`` (``p50``, ...); None when it was not measured."""
    e = per_q.get(q) if per_q else None
    return None if e is None else e["value"]
