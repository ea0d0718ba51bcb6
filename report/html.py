"""The report as one self-contained HTML page: the tables plus four plots."""

from __future__ import annotations

import math
from html import escape

from tailreplay.report.model import Report, SideName, side_items, side_label
from tailreplay.report.svg import Line, line_chart
from tailreplay.report.table import ReportTable
from tailreplay.traces.archive.replay_header import ReplayHeader

__all__ = ["html_report"]

_COLORS: dict[SideName, str] = {"recorded": "#1f77b4", "replayed": "#d62728"}
_CLOCK = "s from start, on the replay's clock (recorded times divided by the speed)"
_SAME_CLOCK = "s from start"
_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
caption { caption-side: bottom; text-align: left; color: #666; font-size: 12px; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
table.run td { text-align: left; }
"""


def html_report(line: str, tables: list[ReportTable], report: Report) -> str:
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><title>tailreplay report</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>tailreplay report</h1>",
        f"<p>{escape(line)}</p>",
    ]
    if warnings := report["warnings"]:  # what the terminal says on stderr
        out += ['<ul class="warnings">', *(f"<li>warning: {escape(w)}</li>" for w in warnings)]
        out.append("</ul>")
    # The run's record first, then the plots, then the figures.
    runs = [t for t in tables if t.title == "run"]
    for t in runs:
        out += _table(t, css="run")
    out += ['<div class="plots">', *_plots(report), "</div>"]
    for t in tables:
        if t not in runs:
            out += _table(t)
    out.append("</body></html>")
    return "\n".join(out)


def _table(t: ReportTable, css: str = "") -> list[str]:
    if not t.rows:
        return [f"<h2>{escape(t.title)}</h2><p>{escape(t.note)}</p>"]
    out = [f"<h2>{escape(t.title)}</h2><table{f' class={css!r}' if css else ''}>"]
    if t.note:
        out.append(f"<caption>{escape(t.note)}</caption>")
    if any(t.columns):
        out.append("<tr>" + "".join(f"<th>{escape(c)}</th>" for c in t.columns) + "</tr>")
    for row in t.rows:
        out.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return out


def _plots(report: Report) -> list[str]:
    # Percentiles on a "nines" axis, -log10(1 - p), so P99 and P99.9 get as much room
    # as the body of the distribution.
    cdf = [
        Line(
            side_label(report, name),
            [-math.log10(1 - p / 100) for p in c["pct"]],
            c["ms"],
            _COLORS[name],
        )
        for name, c in side_items(report["cdf"])
    ]
    series = side_items(report["series"])
    # On the replay's clock: at 2x, the recorded second 20 is the replay's second 10,
    # and the rate the replay asked for is twice the recorded (times --amplify).
    speed = ReplayHeader.read(report["replay"]).speed_mean or 1.0
    rate_scale = report["rate_scale"] or 1.0
    over_time = []
    rate = []
    for name, s in series:
        label = side_label(report, name)
        t_s = [t / speed for t in s["t_s"]] if name == "recorded" else s["t_s"]
        over_time.append(Line(f"{label} P50", t_s, s["p50_ms"], _COLORS[name]))
        over_time.append(Line(f"{label} P99", t_s, s["p99_ms"], _COLORS[name] + "88"))
        if name == "recorded" and rate_scale != 1:
            scaled = [None if r is None else r * rate_scale for r in s["rate_rps"]]
            rate.append(Line(f"{label} x{rate_scale:g}", t_s, scaled, _COLORS[name]))
        else:
            rate.append(Line(label, t_s, s["rate_rps"], _COLORS[name]))
    lag = [
        Line("dispatch lag P99", s["t_s"], s["lag_p99_ms"], _COLORS[name])
        for name, s in series
        if s["lag_p99_ms"] is not None
    ]
    # A shadow answered each copy as production answered it: one clock, no speed.
    clock = _SAME_CLOCK if "shadow" in report else _CLOCK
    return [*_latency_plots(cdf, over_time, rate, lag, clock), *_engine_plots(report)]


def _latency_plots(
    cdf: list[Line], over_time: list[Line], rate: list[Line], lag: list[Line], clock: str
) -> list[str]:
    return [
        line_chart(
            "latency by percentile",
            cdf,
            log_y=True,
            y_label="ms",
            x_label="nines: 0.3 = P50, 1 = P90, 2 = P99, 3 = P99.9",
        ),
        line_chart("latency over time", over_time, x_label=clock, y_label="ms"),
        line_chart("request rate", rate, x_label=clock, y_label="req/s"),
        # Only a replay sends on a schedule: no lag to plot for a capture or a shadow.
        *([line_chart("dispatch lag", lag, x_label=clock, y_label="ms")] if lag else []),
    ]


def _engine_plots(report: Report) -> list[str]:
    """The target's own series (``replay --scrape``), on the same time axis."""
    engine = report.get("engine")
    if engine is None:
        return []
    s = engine["series"]

    def line(name: str, color: str) -> list[Line]:
        return [Line(name, s[name]["t_s"], s[name]["values"], color)] if name in s else []

    queues = line("waiting", "#d62728") + line("running", "#2ca02c")
    memory = line("kv_cache_usage", "#9467bd") + line("gpu_utilization", "#8c564b")
    return [
        line_chart(
            "target: requests waiting and running",
            queues,
            x_label=_CLOCK,
            y_label="requests",
        ),
        line_chart("target: KV-cache usage", memory, x_label=_CLOCK, y_label="0..1"),
    ]
