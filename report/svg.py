"""Small line charts as inline SVG, so an HTML report is one file with no scripts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Line", "line_chart"]

_W, _H = 640, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 28, 44


@dataclass(frozen=True)
class Line:
    name: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    """None leaves a gap (a time bin with no requests)."""
    color: str


def line_chart(
    title: str, lines: Sequence[Line], *, x_label: str, y_label: str, log_y: bool = False
) -> str:
    points = [
        (x, y)
        for line in lines
        for x, y in zip(line.xs, line.ys, strict=True)
        if y is not None and (y > 0 or not log_y)
    ]
    if not points:
        return f"<p><em>{escape(title)}: no data</em></p>"
    x_lo, x_hi = min(p[0] for p in points), max(p[0] for p in points)
    y_lo, y_hi = min(p[1] for p in points), max(p[1] for p in points)
    if not log_y:
        y_lo = min(y_lo, 0.0)
    fy = math.log10 if log_y else (lambda v: v)
    y0, y1 = fy(y_lo), fy(y_hi)
    if y1 == y0:
        y1 = y0 + 1
    if x_hi == x_lo:
        x_hi = x_lo + 1

    def sx(x: float) -> float:
        return _LEFT + (x - x_lo) / (x_hi - x_lo) * (_W - _LEFT - _RIGHT)

    def sy(y: float) -> float:
        return _H - _BOTTOM - (fy(y) - y0) / (y1 - y0) * (_H - _TOP - _BOTTOM)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" '
        f'width="{_W}" height="{_H}" font-family="sans-serif" font-size="11">',
        f'<text x="{_LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{_W - _LEFT - _RIGHT}" '
        f'height="{_H - _TOP - _BOTTOM}" fill="none" stroke="#ccc"/>',
    ]
    for i in range(5):
        fx = x_lo + (x_hi - x_lo) * i / 4
        parts.append(
            f'<text x="{sx(fx):.1f}" y="{_H - _BOTTOM + 14}" '
            f'text-anchor="middle">{_tick(fx)}</text>'
        )
        vy = 10 ** (y0 + (y1 - y0) * i / 4) if log_y else y0 + (y1 - y0) * i / 4
        parts.append(
            f'<text x="{_LEFT - 4}" y="{sy(vy) + 4:.1f}" text-anchor="end">{_tick(vy)}</text>'
        )
    parts.append(
        f'<text x="{(_W + _LEFT) / 2}" y="{_H - 8}" text-anchor="middle">{escape(x_label)}</text>'
    )
    mid = (_H - _BOTTOM + _TOP) / 2
    parts.append(
        f'<text x="14" y="{mid}" text-anchor="middle" '
        f'transform="rotate(-90 14 {mid})">{escape(y_label)}</text>'
    )
    for n, line in enumerate(lines):
        for run in _runs(line, log_y):
            coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in run)
            parts.append(
                f'<polyline points="{coords}" fill="none" stroke="{line.color}" '
                f'stroke-width="1.5"/>'
            )
        lx = _LEFT + 8 + n * 150
        parts.append(f'<rect x="{lx}" y="{_TOP + 6}" width="10" height="10" fill="{line.color}"/>')
        parts.append(f'<text x="{lx + 14}" y="{_TOP + 15}">{escape(line.name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _runs(line: Line, log_y: bool) -> list[list[tuple[float, float]]]:
    """The line's points split where a value is missing."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in zip(line.xs, line.ys, strict=True):
        if y is None or (log_y and y <= 0):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((x, y))
    return [r for r in runs if r]


def _tick(v: float) -> str:
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10 or a == 0:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.1f}"
    return f"{v:.2g}"
