"""The per-request tables: replayed minus recorded latency (shadow minus production),
and the largest slow-downs, each with and without the tail-stretched requests; and
the latency rows again over the pairs whose answers are as long."""

from __future__ import annotations

from tailreplay.report.model import Deltas, SlowDown
from tailreplay.report.quantiles import QUANTILES
from tailreplay.report.table import ReportTable, ms, num, pct

__all__ = ["delta_tables"]

_Q_LABELS = {"p50": "P50", "p95": "P95", "p99": "P99", "p999": "P99.9"}


def delta_tables(d: Deltas, sides: tuple[str, str] = ("recorded", "replayed")) -> list[ReportTable]:
    """The tables of ``d``; ``sides`` names the original's side and the other's as the
    report does (``side_label``: production and shadow in a shadow report)."""
    old, new = sides
    title = f"per request: {new} minus {old} latency"
    if not d["compared"]:
        why = "a failed request has none"
        if sides == ("recorded", "replayed"):
            why = "an imported trace records arrivals and lengths only; " + why
        return [
            ReportTable(
                title,
                [""],
                note=(
                    f"{d['joined']:,} of the {new} requests joined their {old} original "
                    f"by trace id, but no pair has two latencies to compare ({why})"
                ),
            )
        ]
    t = ReportTable(
        title,
        ["", *(_Q_LABELS[q] for q in QUANTILES)],
        note=(
            f"{d['compared']:,} pairs compared ({d['joined']:,} joined by trace id, "
            f"{d['unmatched']:,} without a {old} original); slower than {old}: "
            f"{pct(d['slower_share'])}"
        ),
    )
    delta, ratio = d["latency_delta_ms"], d["latency_ratio"]
    t.rows.append(["delta ms", *(ms(None if delta is None else delta[k]) for k in QUANTILES)])
    t.rows.append(["ratio", *(num(None if ratio is None else ratio[k], 2) for k in QUANTILES)])
    tables = [t, _worst("largest slow-downs", d["worst"], sides)]
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
            f"; not tail-stretched: {plain['compared']:,} pairs, slower than {old} "
            f"{pct(plain['slower_share'])}"
        )
        tables.append(_worst("largest slow-downs, not tail-stretched", plain["worst"], sides))
    same = d.get("same_length")
    if same is not None:
        # A longer answer is slower whatever the speed: these rows compare speed alone.
        delta, ratio = same["latency_delta_ms"], same["latency_ratio"]
        t.rows.append(
            ["delta ms, same length", *(ms(None if delta is None else delta[k]) for k in QUANTILES)]
        )
        t.rows.append(
            [
                "ratio, same length",
                *(num(None if ratio is None else ratio[k], 2) for k in QUANTILES),
            ]
        )
        t.note += (
            f"; same length (as many output tokens on both sides): {same['compared']:,} "
            f"pairs, slower than {old} {pct(same['slower_share'])}"
        )
    return tables


def _worst(title: str, rows: list[SlowDown], sides: tuple[str, str]) -> ReportTable:
    # A replay's tail is stretched by design; nothing else has a tail column to show.
    replay = sides == ("recorded", "replayed")
    worst = ReportTable(
        title,
        ["trace id", "input tokens", f"{sides[0]} ms", f"{sides[1]} ms", *(["tail"] * replay)],
        note="span ids are in the JSON and in --deltas"
        + ("; tail: sent with a stretched budget" if replay else ""),
    )
    for w in rows:
        row = [w["trace_id"], f"{w['input_tokens']:,}", ms(w["recorded_ms"]), ms(w["replayed_ms"])]
        worst.rows.append([*row, "yes" if w["tail"] else ""] if replay else row)
    return worst
