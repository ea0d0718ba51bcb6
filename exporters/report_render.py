"""The report's tables on the terminal (rich) and as Markdown."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tailreplay.exporters.report_tables import ReportTable

__all__ = ["markdown", "print_report"]


def print_report(line: str, tables: list[ReportTable], console: Console | None = None) -> None:
    console = console or Console()
    console.print(line)
    for t in tables:
        if t.wide:
            continue
        if not t.rows:  # a finding in words, not a table
            console.print(f"{t.title}: {t.note}")
            continue
        table = Table(title=t.title, title_justify="left", caption=t.note or None,
                      caption_justify="left")  # fmt: skip
        for i, col in enumerate(t.columns):
            # The row label stays whole; figures fold rather than lose digits to "…".
            if i == 0:
                table.add_column(col, no_wrap=True)
            else:
                table.add_column(col, justify="right", overflow="fold")
        for row in t.rows:
            table.add_row(*row)
        console.print(table)


def markdown(line: str, tables: list[ReportTable]) -> str:
    out = ["# tailreplay report", "", line, ""]
    for t in tables:
        if t.wide:
            continue
        out += [f"## {t.title}", ""]
        if not t.rows:
            out += [t.note, ""]
            continue
        out.append("| " + " | ".join(_cell(c) for c in t.columns) + " |")
        out.append("|" + "|".join(":--" if i == 0 else "--:" for i in range(len(t.columns))) + "|")
        out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
        if t.note:
            out += ["", f"_{t.note}_"]
        out.append("")
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or " "
