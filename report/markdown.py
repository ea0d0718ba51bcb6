"""The report's tables as Markdown (for a PR comment).

Every piece of text is escaped where it is written, since some came from outside (a
target's error message, model names, paths): HTML (``&``, ``<``, ``>``) so no tag
reaches the page, the characters Markdown would read as links, images, emphasis or
code, the pipe that would split a cell, and control characters (``printable``),
a newline included, which would end a table row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tailreplay.printable import printable
from tailreplay.report.table import ReportTable

__all__ = ["markdown"]


def markdown(line: str, tables: list[ReportTable], warnings: Sequence[str] = ()) -> str:
    out = ["# tailreplay report", "", _text(line), ""]
    # What the terminal says on stderr, here under the headline it qualifies.
    out += [*(f"- warning: {_text(w)}" for w in warnings), *([""] if warnings else [])]
    for t in tables:
        if t.wide:
            continue
        out += [f"## {_text(t.title)}", ""]
        if not t.rows:
            out += [_text(t.note), ""]
            continue
        out.append("| " + " | ".join(_cell(c) for c in t.columns) + " |")
        out.append("|" + "|".join(":--" if i == 0 else "--:" for i in range(len(t.columns))) + "|")
        out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
        if t.note:
            out += ["", f"_{_text(t.note)}_"]
        out.append("")
    return "\n".join(out)


_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKUP = re.compile(r"[&<>\\`*_\[\]|]")


def _text(text: str) -> str:
    """``text`` as Markdown shows it literally (``__doc__``)."""
    return _MARKUP.sub(lambda m: _HTML.get(m.group(), "\\" + m.group()), printable(text))


def _cell(text: str) -> str:
    return _text(text) or " "
