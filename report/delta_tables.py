"""The per-request tables: replayed minus recorded latency, and the largest
slow-downs, each with and without the tail-stretched requests."""

from __future__ import annotations

from tailreplay.report.model import Deltas, SlowDown
from tailreplay.report.quantiles import QUANTILES
from tailreplay.report.table import ReportTable, ms, num, pct

__all__ = ["delta_tables"]

_Q_LABELS = {"p50": "P50", "p95": "P95", "p99": "P99", "p999": "P99.9"}


def delta_tables(d: Deltas) -> list[ReportTable]:
    if not d["compared"]:
        return [
            ReportTable(
                "per request: replayed minus recorded latency",
                [""],
                note=(
                    f"{d['joined']:,} of the replayed requests joined their recorded original "
                    "by trace id, but no pair has two latencies to compare (an imported "
                    "trace records arrivals and lengths only)"
                ),
            )
        ]
    t = ReportTable(
        "per request: replayed minus recorded latency",
        ["", *(_Q_LABELS[q] for q in QUANTILES)],
        note=(
            f"{d['compared']:,} pairs compared ({d['joined']:,} joined by trace id, "
            f"{d['unmatched']:,} without a recorded original); slower than recorded: "
            f"{pct(d['slower_share'])}"
        ),
    )
    delta, ratio = d["latency_delta_ms"], d["latency_ratio"]
    t.rows.append(["delta ms", *(ms(None if delta is None else delta[k]) for k in QUANTILES)])
    t.rows.append(["ratio", *(num(None if ratio is None else ratio[k], 2) for k in QUANTILES)])
    tables = [t, _worst("largest slow-downs", d["worst"])]
    plain = d.get("without_tail")
    if plain is not None:
        # The stretched requests are slower by design: the rows a regression reads.
        delta, ratio = plain["latency_delta_ms"], plain["latency_ratio"]
        t.rows.append(
            [
                "delta ms, not tail-stretched",
                *(ms(None if delta is None else delta[k]) for k in QUANTILES),
            ]
        )
        t.rows.append(
            [
                "ratio, not tail-stretched",
                *(num(None if ratio is None else ratio[k], 2) for k in QUANTILES),
            ]
        )
        t.note += (
            f"; not tail-stretched: {plain['compared']:,} pairs, slower than recorded "
            f"{pct(plain['slower_share'])}"
        )
        tables.append(_worst("largest slow-downs, not tail-stretched", plain["worst"]))
    return tables


def _worst(title: str, rows: list[SlowDown]) -> ReportTable:
    worst = ReportTable(
        title,
        ["trace id", "input tokens", "recorded ms", "replayed ms", "tail"],
        note="span ids are in the JSON and in --deltas; tail: sent with a stretched budget",
    )
    for w in rows:
        worst.rows.append(
            [
                w["trace_id"],
                f"{w['input_tokens']:,}",
                ms(w["recorded_ms"]),
                ms(w["replayed_ms"]),
                "yes" if w["tail"] else "",
            ]
        )
    return worst
