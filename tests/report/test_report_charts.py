"""What a report's reader sees around the figures: charts whose legends name only the
series drawn and whose axes are ticked at round values, labelled; and a run table
that names the target, the built-in simulator included."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.report.svg import Line, Mark, line_chart
from tests.helpers import REPO

PEAK = REPO / "traces/peak.msgpack"


def _ticks(svg: str, anchor: str) -> list[str]:
    """The tick labels of one axis: x ticks are centred, y ticks end at the axis."""
    return re.findall(rf'text-anchor="{anchor}">([^<]+)</text>', svg)


def _round_steps(labels: list[str]) -> bool:
    """Evenly spaced at 1, 2, 2.5 or 5 times a power of ten, from a multiple of it."""
    values = [float(t.replace(",", "")) for t in labels]
    step = values[1] - values[0]
    gaps = [b - a for a, b in itertools.pairwise(values)]
    even = all(math.isclose(gap, step, rel_tol=1e-6) for gap in gaps)
    mantissa = step / 10 ** math.floor(math.log10(step))
    round_step = any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5))
    multiple = math.isclose(values[0] / step, round(values[0] / step), abs_tol=1e-6)
    return even and round_step and multiple


def test_a_series_without_data_gets_no_legend() -> None:
    # An imported trace has no recorded latency: its line would be a legend of nothing.
    drawn = Line("replayed", [0, 1, 2], [10.0, 12.0, 11.0], "#d62728")
    empty = Line("recorded", [0, 1, 2], [None, None, None], "#1f77b4")
    svg = line_chart("latency over time", [empty, drawn], x_label="s", y_label="ms")
    assert ">replayed</text>" in svg and ">recorded</text>" not in svg
    assert 'fill="#1f77b4"' not in svg and 'stroke="#1f77b4"' not in svg
    nothing = line_chart("t", [empty], x_label="s", y_label="ms")
    assert nothing == "<p><em>t: no data</em></p>"


@pytest.mark.parametrize(
    ("xs", "ys"),
    [
        ([0.0, 13.7, 27.9], [391.0, 1733.0, 522.0]),
        ([0.013, 0.41], [0.0021, 0.0093]),
        ([3.0, 3_601.0], [7.0, 7.0]),  # a flat line: still a span of round ticks
    ],
)
def test_ticks_are_round_and_cover_the_data(xs: list[float], ys: list[float]) -> None:
    svg = line_chart("t", [Line("a", xs, ys, "#000")], x_label="time s", y_label="latency ms")
    x_ticks, y_ticks = _ticks(svg, "middle"), _ticks(svg, "end")
    x_ticks = [t for t in x_ticks if t not in ("time s", "latency ms")]
    assert len(x_ticks) >= 2 and len(y_ticks) >= 2
    assert _round_steps(x_ticks) and _round_steps(y_ticks), (x_ticks, y_ticks)
    x_values = [float(t.replace(",", "")) for t in x_ticks]
    assert x_values[0] <= min(xs) and x_values[-1] >= max(xs)
    assert ">time s</text>" in svg and ">latency ms</text>" in svg


def test_a_log_axis_is_ticked_at_powers_of_ten_and_says_so() -> None:
    line = Line("a", [0, 1, 2, 3], [3.0, 40.0, 900.0, 12_000.0], "#000")
    svg = line_chart("t", [line], x_label="s", y_label="ms", log_y=True)
    assert _ticks(svg, "end") == ["1", "10", "100", "1,000", "10,000", "100,000"]
    assert ">ms (log scale)</text>" in svg


def test_a_mark_is_named_and_inside_the_axes() -> None:
    line = Line("P99", [0.5, 1, 2], [100.0, 200.0, 900.0], "#000")
    limit = Mark("limit 2000 ms", 2000.0, "#d62728")
    svg = line_chart("t", [line], x_label="factor", y_label="ms", y_marks=[limit])
    y_values = [float(t.replace(",", "")) for t in _ticks(svg, "end")]
    assert max(y_values) >= 2000 and ">limit 2000 ms</text>" in svg


def test_the_run_table_names_the_built_in_simulator(tmp_path: Path) -> None:
    out, md = tmp_path / "r.msgpack", tmp_path / "r.md"
    args = ["replay", "--limit", "3", "--sim-profile", "fast", "-o", str(out), str(PEAK)]
    result = CliRunner().invoke(cli, [*args, "--report", str(md)])
    assert result.exit_code == 0, result.output
    row = next(line for line in md.read_text().splitlines() if line.startswith("| target |"))
    assert row.startswith("| target | the built-in simulator (profile fast, context ")
