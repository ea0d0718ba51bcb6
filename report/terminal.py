"""Everything tailreplay prints as tables or readable records on a terminal.

`traces inspect` (an archive's header and records), `traces stats` (the stats
tables) and `report` / `replay --report` (the report's tables) all render here.
Text that came from outside (archive strings, a target's messages) is shown
through ``printable`` (control characters escaped) and given to rich as ``Text``,
never as markup: a model named ``[/bold]`` is a name, not a tag.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tailreplay.printable import printable
from tailreplay.report.table import ReportTable
from tailreplay.traces.results.stats import StatsSummary
from tailreplay.units import format_ns

__all__ = ["describe_header", "describe_record", "print_report", "print_stats", "stderr_console"]

_TIMESTAMPS = frozenset({"start_ns", "intended_ns", "sent_ns", "created_ns"})
_DURATIONS = frozenset({"duration_ns", "ttfb_ns", "lag_ns"})
_IDS = frozenset({"trace_id", "span_id", "parent_span_id", "orig_trace_id", "orig_span_id"})
_PREVIEW = 8


def _value(name: str, value: Any) -> str:
    if name in _TIMESTAMPS and isinstance(value, int):
        return f"{format_ns(value)}  ({value})"
    if name in _DURATIONS and isinstance(value, int):
        return f"{value / 1e6:.3f} ms"
    if name in _IDS and isinstance(value, bytes):
        return value.hex()
    if name == "req_body" and isinstance(value, bytes):
        text = value[:120].decode("utf-8", "replace")
        more = "…" if len(value) > 120 else ""
        return f"({len(value)} bytes) {text}{more}"
    if name == "req_headers" and isinstance(value, list):
        return ", ".join(f"{k}: {v}" for k, v in value)
    if name in ("chunk_gaps_us", "prefix_hashes") and isinstance(value, list):
        shown = [f"{v:016x}" if name == "prefix_hashes" else str(v) for v in value[:_PREVIEW]]
        more = f", … ({len(value)} in all)" if len(value) > _PREVIEW else ""
        return "[" + ", ".join(shown) + more + "]"
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _lines(m: dict[Any, Any], indent: str = "  ") -> list[str]:
    # A key that is not a string (msgpack allows bytes) is shown as Python writes it.
    keys = {k: printable(k if isinstance(k, str) else repr(k)) for k in m}
    width = max(map(len, keys.values()), default=0)
    return [f"{indent}{keys[k].ljust(width)}  {printable(_value(k, v))}" for k, v in m.items()]


def describe_header(path: str, header: dict[str, Any]) -> str:
    return "\n".join([printable(path), "header:", *_lines(header)])


def describe_record(index: int, m: dict[str, Any]) -> str:
    return "\n".join([f"record {index}:", *_lines(m)])


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich would exit 1 (a failed run's code); the command line decides instead.
        raise BrokenPipeError


def _console() -> Console:
    """stdout's console: a terminal's width on a terminal; piped to a file or a CI
    log, as wide as the content (a table wrapped inside its cells cannot be read)."""
    return _Console() if sys.stdout.isatty() else _Console(width=_UNBOUNDED)


_UNBOUNDED = 1_000


def stderr_console() -> Console:
    """``_console`` on stderr: where the tables go when stdout holds a document."""
    return _Console(stderr=True) if sys.stderr.isatty() else _Console(stderr=True, width=_UNBOUNDED)


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def print_stats(summary: StatsSummary, console: Console | None = None) -> None:
    """The ``traces stats`` report: totals, a percentile table and the bucket table."""
    console = console or _console()
    rate = summary["rate_rps"]
    err = summary["error_rate"]
    console.print(
        f"records {summary['records']:,}   arrivals over {summary['duration_s']:,.1f} s   "
        f"arrival rate {_fmt(rate, 2)} req/s   "
        f"errors {_fmt(None if err is None else err * 100, 2)}%"
    )
    clock = summary.get("clock")
    if clock is not None:
        console.print(f"clock: {clock['described']}")
    if copies := summary.get("shadow_copies"):
        console.print(
            f"shadow copies {copies:,}: in no figure here (report --shadow compares them "
            "with production)"
        )
    if cut := summary.get("cancelled"):
        console.print(f"cancelled by the client {cut:,}: not errors, in no figure")
    if idle := summary.get("idle_calls"):
        calls = ", ".join(f"{name} {n:,}" for name, n in idle.items())
        console.print(
            f"calls that generate nothing {sum(idle.values()):,} ({calls}): "
            "in no figure but records and arrivals"
        )
    if summary.get("shed"):
        console.print(
            f"shed {summary['shed']:,}: recorded while the proxy's recorder was behind, "
            "without their prompt's body, prefix hashes and statistics"
        )
    table = Table(title="percentiles (successful requests)", title_justify="left")
    table.add_column("metric")
    for name in ("p50", "p95", "p99", "p99.9"):
        table.add_column(name, justify="right")
    for p, label in (
        (summary["latency_ms"], "latency ms"),
        (summary["ttft_ms"], "TTFT ms"),
        (summary["tpot_ms"], "TPOT ms"),
        (summary["input_tokens"], "input tokens"),
        (summary["output_tokens"], "output tokens"),
    ):
        if p is None:
            table.add_row(label, "-", "-", "-", "-")
        else:
            table.add_row(label, *(_fmt(p[q]) for q in ("p50", "p95", "p99", "p999")))
    console.print(table)
    buckets = Table(title="by input tokens", title_justify="left")
    columns = ("input tokens", "count", "p50 ms", "p95 ms", "p99 ms", "arrivals req/s", "errors %")
    for col in columns:
        buckets.add_column(col, justify="left" if col == "input tokens" else "right")
    for row in summary["buckets"]:
        lat = row["latency_ms"] or {}
        er = row["error_rate"]
        buckets.add_row(
            row["range"],
            f"{row['count']:,}",
            _fmt(lat.get("p50")),
            _fmt(lat.get("p95")),
            _fmt(lat.get("p99")),
            _fmt(row["rate_rps"], 3),
            _fmt(None if er is None else er * 100, 2),
        )
    console.print(buckets)


def _text(s: str) -> Text:
    """Outside text as rich shows it: escaped, and never parsed as markup."""
    return Text(printable(s))


def print_report(line: str, tables: list[ReportTable], console: Console | None = None) -> None:
    console = console or _console()
    console.print(_text(line))
    for t in tables:
        if t.wide:
            continue
        if not t.rows:  # a finding in words, not a table
            console.print(_text(f"{t.title}: {t.note}"))
            continue
        table = Table(
            title=_text(t.title),
            title_justify="left",
            caption=_text(t.note) if t.note else None,
            caption_justify="left",
        )
        for i, col in enumerate(t.columns):
            # The row label stays whole; figures fold rather than lose digits to "…".
            if i == 0:
                table.add_column(_text(col), no_wrap=True)
            else:
                table.add_column(_text(col), justify="right", overflow="fold")
        for row in t.rows:
            table.add_row(*map(_text, row))
        console.print(table)
