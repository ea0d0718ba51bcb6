"""The report's tables as Markdown (for a PR comment)."""

from __future__ import annotations

from tailreplay.report.tables import ReportTable

__all__ = ["markdown"]


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
