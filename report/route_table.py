"""The report's table by API route, beside the one by input length: per route and
side, requests, error rate, latency and TTFT P50/P99 (report/routes.py)."""

from __future__ import annotations

from tailreplay.report.model import Report, is_replay, side_items, side_label
from tailreplay.report.table import ReportTable, ms, pct, quantile_value

__all__ = ["route_tables"]

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
