"""The report as titled tables of strings, rendered to the terminal, Markdown and HTML.

One place decides what the report shows and how numbers read; the three
renderers only lay the tables out.
"""

from __future__ import annotations

from collections.abc import Callable

from tailreplay.openai_api import calls_that_generate_nothing
from tailreplay.report.delta_tables import delta_tables
from tailreplay.report.model import (
    EngineReport,
    Metric,
    Percentile,
    Report,
    Shards,
    SideName,
    SideSummary,
    SloMatrix,
    SloScope,
    SloVerdict,
    is_replay,
    side_items,
    side_label,
)
from tailreplay.report.quantiles import QUANTILES
from tailreplay.report.routes import route_tables
from tailreplay.report.shadow_report import shadow_words
from tailreplay.report.table import ReportTable, ms, num, pct, quantile_value
from tailreplay.traces.archive.replay_header import ReplayHeader

__all__ = ["ReportTable", "headline", "report_tables", "slo_table"]

_LABELS: dict[Metric, str] = {
    "latency": "latency ms",
    "latency_from_due": "latency from due ms",
    "ttft": "TTFT ms",
    "ttft_content": "TTFT to answer ms",
    "ttst": "TTST ms",
    "tpot": "TPOT ms",
    "itl": "ITL ms",
}
_Q_LABELS = {"p50": "P50", "p95": "P95", "p99": "P99", "p999": "P99.9"}


def _interval(e: Percentile | None) -> str:
    if e is None or e["low"] is None:
        return ""
    return f"{ms(e['low'])}-{ms(e['high'])}"


def headline(report: Report, slo: SloMatrix | None) -> str:
    """One line: what was compared and the verdict."""
    rep = report["overall"]["replayed"]
    if report["replay"].get("source") == "replay:dry-run":
        return f"dry run: {rep['requests']:,} requests scheduled, none sent"
    parts = [f"{side_label(report, 'replayed')} {rep['requests']:,} requests"]
    partial = report.get("partial")
    if partial is not None:
        parts[0] = f"PARTIAL RUN ({partial['due']:,} of {partial['scheduled']:,} due): " + parts[0]
    if "shadow" in report:
        parts = [shadow_words(report)]
    idle = sum(r["requests"] for r in report.get("idle", {}).get("replayed", []))
    if idle:
        parts[0] += f" (and {calls_that_generate_nothing(idle)}, not judged)"
    speed = ReplayHeader.read(report["replay"]).speed
    if speed is not None:
        parts.append(f"at {speed}")
    recorded = report["overall"].get("recorded")
    if recorded is not None:
        parts.append(f"against {recorded['requests']:,} {side_label(report, 'recorded')}")
    if "shadow" in report and recorded is not None:
        parts[-1] = f"against the same {recorded['requests']:,} as production answered them"
        errors = f"shadow {pct(rep['error_rate'])}, production {pct(recorded['error_rate'])}"
        parts.append(f"errors: {errors}")
    else:
        parts.append(f"errors {pct(rep['error_rate'])}")
    line = ", ".join(parts)
    client = report["client"]
    if client is not None and client["client_bound"]:
        line += f"; CLIENT-BOUND (dispatch lag P99 {client['lag_p99_ms']:.1f} ms)"
    late = [r for r in report["shards"]["rows"] if r["late"]] if "shards" in report else []
    if late:
        line += "; " + ", ".join(
            f"shard {r['label']} started {(r['first_lag_ms'] or 0) / 1e3:.1f} s late" for r in late
        )
    verdict = report.get("verdict")
    if slo is not None and slo["rows"] and verdict is not None:
        if verdict["state"] == "not_judged":
            # A score over figures that cannot be judged would read as a pass: the
            # reason instead (the client-bound one is said above already).
            why = "" if client is not None and client["client_bound"] else verdict["reason"]
            line += f"; SLO {_STATE['not_judged']}" + (f": {why}" if why else "")
        else:
            line += f"; SLO {_STATE[verdict['state']]} (score {slo['score']:.2f}, needs "
            line += f"{slo['min_score']:.2f})"
    return line


_STATE = {"pass": "PASS", "fail": "FAIL", "not_judged": "NOT JUDGED"}
"""How the verdict reads in the headline and the SLO table's title."""


def report_tables(report: Report, slo: SloMatrix | None) -> list[ReportTable]:
    tables = [_overview(report), _percentiles(report), _buckets(report), *route_tables(report)]
    if "shards" in report:
        tables.append(_shards(report["shards"]))
    if report["phases"]:
        tables.append(_phases(report))
    if "closed_loop" in report:
        tables.append(_closed_loop(report))
    if "retries" in report:
        tables.append(_retries(report))
    if "engine" in report:
        tables += _engine(report["engine"])
    if any(kinds for _, kinds in side_items(report["errors"])):
        tables.append(_errors(report))
    if "idle" in report:
        tables.append(_idle(report))
    if slo is not None and slo["rows"]:
        side = side_label(report, "replayed")
        tables += [slo_table(slo, report.get("verdict"), side), _slo_matrix(slo, side)]
        tables += [_scope_table(scope) for scope in slo.get("scopes", [])]
    if report["deltas"] is not None:
        sides = (side_label(report, "recorded"), side_label(report, "replayed"))
        tables += delta_tables(report["deltas"], sides)
    return tables


def _idle(report: Report) -> ReportTable:
    """Calls that generate nothing, per side and path: listed, not judged."""
    t = ReportTable(
        "not judged: calls that generate nothing",
        ["call", "side", "requests", "errors", "latency P50 ms", "latency P99 ms"],
        note="a lookup's latency, not a generation's: in no other table and under no SLO "
        "(--slo-by path judges every path, these included)",
    )
    for name, rows in side_items(report["idle"]):
        for r in rows:
            t.rows.append(
                [
                    r["call"],
                    side_label(report, name),
                    f"{r['requests']:,}",
                    f"{r['errors']:,}",
                    ms(r["latency_p50_ms"]),
                    ms(r["latency_p99_ms"]),
                ]
            )
    return t


def _sides(report: Report) -> list[SideName]:
    return [name for name, _ in side_items(report["overall"])]


_THROUGHPUT = "throughput req/s (ok, first start to last end)"


def _errors_cell(s: SideSummary) -> str:
    """The count and the rate, which is over the requests not cut (``cancelled``)."""
    cut = s.get("cancelled", 0)
    of = f" of {s['requests'] - cut:,} not cut" if cut else ""
    return f"{s['errors']:,} ({pct(s['error_rate'])}{of})"


def _overview(report: Report) -> ReportTable:
    sides = _sides(report)
    t = ReportTable("overview", ["", *(side_label(report, name) for name in sides)])
    rows: list[tuple[str, Callable[[SideSummary], str]]] = [
        ("requests", lambda s: f"{s['requests']:,}"),
        ("errors", _errors_cell),
        # Not the arrival rate (traces stats): answers, over first start to last end.
        (_THROUGHPUT, lambda s: num(s["throughput_rps"], 2)),
        ("output tokens/s", lambda s: num(s["output_tokens_per_s"], 0)),
        ("tail-stretched", lambda s: f"{s['tail']:,}"),
        ("tokens estimated", lambda s: pct(s["estimated_share"])),
    ]
    if any(report["overall"][name].get("cancelled") for name in sides):
        # A copy is cut by the proxy's stop, an original or a replayed request by its client.
        cut = "cut unfinished (client gone, proxy stopped)" if "shadow" in report else None
        label = cut or "cancelled by the client"
        rows.insert(2, (label, lambda s: f"{s.get('cancelled', 0):,}"))
    if "shadow" in report:  # a copy is sent as it came: nothing is tail-stretched
        rows = [row for row in rows if row[0] != "tail-stretched"]
    for label, cell in rows:
        t.rows.append([label, *(cell(report["overall"][name]) for name in sides)])
    scale = report["rate_scale"]
    if scale is not None and scale != 1 and "recorded" in report["overall"]:
        # Rates are compared as the replay asked for them: at 2x, twice the recorded.
        rec = report["overall"]["recorded"]
        expected = {
            _THROUGHPUT: (rec["throughput_rps"], 2),
            "output tokens/s": (rec["output_tokens_per_s"], 0),
        }
        t.columns.insert(2, f"recorded x{scale:g}")
        for row in t.rows:
            value, digits = expected.get(row[0], (None, 0))
            row.insert(2, num(value * scale, digits) if value is not None else "")
        settings = ReplayHeader.read(report["replay"])
        how = f"speed {settings.speed}"
        if settings.amplify not in (None, 1):
            how += f", --amplify {settings.amplify:g}x"
        t.note = f"recorded x{scale:g}: the recorded rates at the replay's {how}: what it asked for"
    return t


def _shards(shards: Shards) -> ReportTable:
    t = ReportTable(
        "shards: dispatch lag (ms)",
        ["shard", "requests", "first lag", "P50", "P99", "P99 after 1st s"],
        note="first lag: how far behind schedule the shard's first request went out (its "
        "start); after 1st s: over what it sent after its first second of sending, the lag "
        "a late start does not explain",
    )
    for r in shards["rows"]:
        first = ms(r["first_lag_ms"]) + (" LATE" if r["late"] else "")
        t.rows.append(
            [
                r["label"],
                f"{r['requests']:,}",
                first,
                ms(r["lag_p50_ms"]),
                ms(r["lag_p99_ms"]),
                ms(r["lag_p99_after_first_s_ms"]),
            ]
        )
    if shards["late"]:
        t.note += (
            f"; LATE: started more than {shards['late_start_s']:g} s behind schedule; the "
            f"late shards' catch-up ({shards['catch_up']:,} requests sent before each was "
            "back on schedule) is left out of the client verdict"
        )
    cause = {
        "late start": "the late starts, not the client",
        "client": "the client (the late starts do not explain it)",
    }
    if shards["lag_cause"] is not None:
        t.note += f"; dispatch lag P99 {ms(shards['lag_p99_ms'])} ms over every request, from "
        t.note += cause[shards["lag_cause"]]
    return t


def _phases(report: Report) -> ReportTable:
    t = ReportTable(
        "replayed by load phase (ms)",
        ["phase", "seconds", "requests", "req/s", "P50", "P95", "P99", "TTFT P99", "errors"],
        note="req/s: successful requests over the seconds the phase lasted",
    )
    for row in report["phases"]:
        s = row["replayed"]
        lat, ttft = s["metrics"].get("latency"), s["metrics"].get("ttft")
        t.rows.append(
            [
                row["phase"],
                num(row["seconds"], 1),
                f"{s['requests']:,}",
                num(s["throughput_rps"], 2),
                *(ms(quantile_value(lat, q)) for q in ("p50", "p95", "p99")),
                ms(quantile_value(ttft, "p99")),
                pct(s["error_rate"]),
            ]
        )
    return t


def _closed_loop(report: Report) -> ReportTable:
    t = ReportTable(
        "closed loop: by users and input length (ms)",
        ["users", "input tokens", "requests", "req/s", "P50", "P95", "errors"],
        note="req/s: successful requests over the seconds the user count lasted",
    )
    for row in report["closed_loop"]:
        s = row["replayed"]
        lat = s["metrics"].get("latency")
        t.rows.append(
            [
                row["users"],
                row["range"],
                f"{s['requests']:,}",
                num(s["throughput_rps"], 2),
                ms(quantile_value(lat, "p50")),
                ms(quantile_value(lat, "p95")),
                pct(s["error_rate"]),
            ]
        )
    return t


def _retries(report: Report) -> ReportTable:
    t = ReportTable(
        "retries",
        ["side", "from s", "first attempts", "retries", "attempts per request"],
        note="attempts per request: (first attempts + retries) / first attempts, the "
        "retry amplification; a retry is a request sent again after it failed",
    )
    for name, r in side_items(report["retries"]):
        if r is None:
            continue
        label = side_label(report, name)
        t.rows.append(
            [
                label,
                "all",
                f"{r['first_attempts']:,}",
                f"{r['retries']:,}",
                f"{r['attempts_per_request']:.2f}",
            ]
        )
        for t_s, first, again in r["by_time"]:
            share = f"{(first + again) / first:.2f}" if first else "-"
            t.rows.append([label, f"{t_s:g}", f"{first:,}", f"{again:,}", share])
    return t


def _engine(engine: EngineReport) -> list[ReportTable]:
    t = ReportTable(
        "target metrics",
        ["series", "min", "mean", "max"],
        note=f"{engine['pages']:,} pages read from {', '.join(engine['targets'])}"
        + (f"; {engine['failures']:,} reads failed" if engine["failures"] else ""),
    )
    for s in engine["summary"]:
        t.rows.append([s["name"], num(s["min"], 3), num(s["mean"], 3), num(s["max"], 3)])
    limits = ", ".join(f"{k}={v:g}" for k, v in engine["thresholds"].items())
    f = ReportTable("findings", ["rule", "finding"], note=f"thresholds: {limits}")
    f.rows = [[x["rule"], x["text"]] for x in engine["findings"]] or [["-", "no engine limit hit"]]
    return [t, f]


def slo_tables(slo: SloMatrix, verdict: SloVerdict | None) -> list[ReportTable]:
    """The SLO table and one per scope (``--slo-by``, ``--slo-window``)."""
    return [slo_table(slo, verdict), *(_scope_table(scope) for scope in slo.get("scopes", []))]


def _scope_table(scope: SloScope) -> ReportTable:
    objectives = list(scope["rows"][0]["cells"]) if scope["rows"] else []
    spread = "; ".join(
        f"{o}: {num(lo, 1)}..{num(hi, 1)}" for o, (lo, hi) in scope["spread"].items()
    )
    t = ReportTable(
        f"SLO {scope['name']}",
        ["scope", "requests", "goodput", *objectives, "verdict"],
        note="goodput: the share that succeeded within every absolute limit"
        + (f"; spread across judged rows: {spread}" if spread else ""),
    )
    if not scope["rows"]:
        t.note = "; ".join(scope["failed"])
    for row in scope["rows"]:
        cells = [
            ("-" if c["value"] is None else f"{c['value']:,.4g}")
            + {True: " ok", False: " MISSED", None: ""}[c["ok"]]
            for c in row["cells"].values()
        ]
        verdict = {True: "pass", False: "FAIL", None: "not judged"}[row["passed"]]
        t.rows.append([row["scope"], f"{row['requests']:,}", pct(row["goodput"]), *cells, verdict])
    return t


def _errors(report: Report) -> ReportTable:
    t = ReportTable(
        "errors by kind",
        ["kind", "side", "requests", "first message"],
        note="the message is the server's own, first line (kept redacted)",
    )
    for side, kinds in side_items(report["errors"]):
        for e in kinds:
            # Cut, not failed: in the overview's own row, in no error count or rate.
            kind = f"{e['kind']} (not an error)" if e["kind"] == "cancelled" else e["kind"]
            t.rows.append([kind, side_label(report, side), f"{e['count']:,}", e["message"] or "-"])
    return t


def _percentiles(report: Report) -> ReportTable:
    t = ReportTable(
        "percentiles (successful requests)",
        ["metric", "side", *(_Q_LABELS[q] for q in QUANTILES), "P99 95% CI"],
        note="CI: bootstrap interval (the JSON has one for every percentile); "
        "ITL is read off a 1% histogram",
    )
    for metric, label in _LABELS.items():
        for side in _sides(report):
            per_q = report["overall"][side]["metrics"].get(metric)
            if per_q is None:
                continue
            values = [ms(quantile_value(per_q, q)) for q in QUANTILES]
            t.rows.append([label, side_label(report, side), *values, _interval(per_q.get("p99"))])
    if not t.rows:
        t.note = "nothing to measure: no successful request"
    return t


def _buckets(report: Report) -> ReportTable:
    t = ReportTable(
        "latency by input length (ms)",
        ["input tokens", "side", "requests", "P50", "P95", "P99", "TTFT P99", "errors"],
        note="a replayed request counts in the bucket of its recorded original"
        if is_replay(report)
        else "",
    )
    for row in report["buckets"]:
        if not any(row[side]["requests"] for side in _sides(report)):
            continue
        for n, side in enumerate(_sides(report)):
            s = row[side]
            lat, ttft = s["metrics"].get("latency"), s["metrics"].get("ttft")
            t.rows.append(
                [
                    row["range"] if n == 0 else "",
                    side_label(report, side),
                    f"{s['requests']:,}",
                    *(ms(quantile_value(lat, q)) for q in ("p50", "p95", "p99")),
                    ms(quantile_value(ttft, "p99")),
                    pct(s["error_rate"]),
                ]
            )
    if not t.rows:
        t.note = "nothing to measure: no successful request"
    return t


def slo_table(slo: SloMatrix, verdict: SloVerdict | None, side: str = "replayed") -> ReportTable:
    """Each objective's value on ``side`` (its label), limit and verdict: what
    ``replay --slo`` prints. Its title carries the gate's one verdict."""
    state = _STATE[verdict["state"]] if verdict is not None else "PASS" if slo["passed"] else "FAIL"
    t = ReportTable(
        f"SLOs: score {slo['score']:.2f} ({state})",
        ["objective", "weight", f"{side} ms", "limit ms", "overall", "input-length buckets"],
        note="the score is the weight met overall over the weight of all; buckets are shown, "
        "not scored; an error rate is in %",
    )
    buckets = slo["columns"][1:]
    for row in slo["rows"]:
        rate = row["objective"].startswith("error_rate")
        show = pct if rate else ms
        overall = row["cells"]["overall"]
        missed = [b for b in buckets if row["cells"][b]["ok"] is False]
        judged = [b for b in buckets if row["cells"][b]["ok"] is not None]
        where = "missed in " + ", ".join(missed) if missed else "all met"
        if not judged:
            where = "no data"
        t.rows.append(
            [
                row["objective"],
                f"{row['weight']:g}",
                show(overall["value"]),
                show(overall["limit"]),
                {True: "met", False: "MISSED", None: "no data"}[overall["ok"]],
                where,
            ]
        )
    return t


def _slo_matrix(slo: SloMatrix, side: str) -> ReportTable:
    t = ReportTable(
        "SLO matrix",
        ["objective", "weight", *slo["columns"]],
        wide=True,
        note=(
            f"{side} value in ms (an error rate in %), + met, x missed, ? nothing to judge; "
            "only the overall column is scored (there, nothing to judge is missed)"
        ),
    )
    for row in slo["rows"]:
        cells = [row["objective"], f"{row['weight']:g}"]
        rate = row["objective"].startswith("error_rate")
        for label in slo["columns"]:
            c = row["cells"][label]
            mark = {True: "+", False: "x", None: "?"}[c["ok"]]
            cells.append(f"{mark} {pct(c['value']) if rate else ms(c['value'])}")
        t.rows.append(cells)
    return t
