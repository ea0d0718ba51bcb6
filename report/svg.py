"""Small line charts as inline SVG, so an HTML report is one file with no scripts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Line", "Mark", "line_chart"]

_W, _H = 640, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 28, 44


@dataclass(frozen=True)
class Line:
    name: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    """None leaves a gap (a time bin with no requests)."""
    color: str


@dataclass(frozen=True)
class Mark:
    """A straight line across the chart at ``at`` (a limit, a found value), named."""

    name: str
    at: float
    color: str


def line_chart(
    title: str,
    lines: Sequence[Line],
    *,
    x_label: str,
    y_label: str,
    log_y: bool = False,
    x_marks: Sequence[Mark] = (),
    y_marks: Sequence[Mark] = (),
) -> str:
    """A chart of ``lines`` with both axes labelled and ticked at round values (1, 2,
    2.5 or 5 times a power of ten; powers of ten on a log axis), and dashed ``marks``
    across it (vertical at an x, horizontal at a y), each named. A line with no point
    to draw gets no legend."""
    lines = [line for line in lines if _runs(line, log_y)]
    points = [(x, y) for line in lines for run in _runs(line, log_y) for x, y in run]
    if not points:
        return f"<p><em>{escape(title)}: no data</em></p>"
    xs = [p[0] for p in points] + [m.at for m in x_marks]
    x_ticks = _round_ticks(min(xs), max(xs))
    ys = [p[1] for p in points] + [m.at for m in y_marks if m.at > 0 or not log_y]
    y_lo, y_hi = min(ys), max(ys)
    y_ticks = _log_ticks(y_lo, y_hi) if log_y else _round_ticks(min(y_lo, 0.0), y_hi)
    fy = math.log10 if log_y else (lambda v: v)
    x0, x1 = x_ticks[0], x_ticks[-1]
    y0, y1 = fy(y_ticks[0]), fy(y_ticks[-1])

    def sx(x: float) -> float:
        return _LEFT + (x - x0) / (x1 - x0) * (_W - _LEFT - _RIGHT)

    def sy(y: float) -> float:
        return _H - _BOTTOM - (fy(y) - y0) / (y1 - y0) * (_H - _TOP - _BOTTOM)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" '
        f'width="{_W}" height="{_H}" font-family="sans-serif" font-size="11">',
        f'<text x="{_LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{_W - _LEFT - _RIGHT}" '
        f'height="{_H - _TOP - _BOTTOM}" fill="none" stroke="#ccc"/>',
    ]
    for fx in x_ticks:
        parts.append(
            f'<text x="{sx(fx):.1f}" y="{_H - _BOTTOM + 14}" '
            f'text-anchor="middle">{_tick(fx)}</text>'
        )
    for vy in y_ticks:
        parts.append(
            f'<text x="{_LEFT - 4}" y="{sy(vy) + 4:.1f}" text-anchor="end">{_tick(vy)}</text>'
        )
        parts.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{sy(vy):.1f}" y2="{sy(vy):.1f}" '
            'stroke="#eee"/>'
        )
    parts.append(
        f'<text x="{(_W + _LEFT) / 2}" y="{_H - 8}" text-anchor="middle">{escape(x_label)}</text>'
    )
    mid = (_H - _BOTTOM + _TOP) / 2
    scale = " (log scale)" if log_y else ""
    parts.append(
        f'<text x="14" y="{mid}" text-anchor="middle" '
        f'transform="rotate(-90 14 {mid})">{escape(y_label + scale)}</text>'
    )
    for m in x_marks:
        parts.append(
            f'<line x1="{sx(m.at):.1f}" x2="{sx(m.at):.1f}" y1="{_TOP}" y2="{_H - _BOTTOM}" '
            f'stroke="{m.color}" stroke-dasharray="5,3"/>'
        )
        parts.append(
            f'<text x="{sx(m.at) + 3:.1f}" y="{_H - _BOTTOM - 6}" fill="{m.color}">'
            f"{escape(m.name)}</text>"
        )
    for m in y_marks:
        if m.at <= 0 and log_y:
            continue
        parts.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{sy(m.at):.1f}" y2="{sy(m.at):.1f}" '
            f'stroke="{m.color}" stroke-dasharray="5,3"/>'
        )
        parts.append(
            f'<text x="{_W - _RIGHT - 4}" y="{sy(m.at) - 4:.1f}" text-anchor="end" '
            f'fill="{m.color}">{escape(m.name)}</text>'
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


def _round_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` ticks at a round step, from a multiple of it at or below ``lo``
    to one at or above ``hi``."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / (count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))
    first = math.floor(lo / step + 1e-9) * step
    n = math.ceil((hi - first) / step - 1e-9)
    return [first + i * step for i in range(n + 1)]


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten around [lo, hi] (with 2 and 5 times them over two decades or less)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if b == a:
        b += 1
    if b - a > 2:
        return [10.0**k for k in range(a, b + 1)]
    ticks = [m * 10.0**k for k in range(a, b) for m in (1, 2, 5)] + [10.0**b]
    inside = [t for t in ticks if lo <= t <= hi]
    below = [t for t in ticks if t <= lo][-1:]
    above = [t for t in ticks if t >= hi][:1]
    out = sorted({*below, *inside, *above})
    return out if len(out) >= 2 else [*out, next(t for t in ticks if t > out[-1])]


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
    """A round tick as written: 0, 0.25, 2.5, 40, 1,500."""
    if abs(v) < 1e-12:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"
