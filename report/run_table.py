"""The report's first table: the record of the run — what was replayed at what,
when, by which version, with which command and settings — so a page or a PR
comment read weeks later says what it measured (the JSON has the same under
``replay`` and ``inputs``)."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime

from tailreplay.report.model import Report, is_replay, side_label
from tailreplay.report.table import ReportTable
from tailreplay.shared_options import TAIL_QUANTILE
from tailreplay.traces.archive.replay_header import ReplayHeader

__all__ = ["run_table", "tail_line"]


def run_table(report: Report) -> ReportTable:
    """Target, archives, version, date, command line and settings of the run."""
    settings = report["replay"]
    header = ReplayHeader.read(settings)
    t = ReportTable("run", ["", ""])
    rows: list[tuple[str, str | None]] = [
        ("target", _target(report, header)),
        # A capture reported alone is the recorded side, whatever its key in the JSON.
        (side_label(report, "replayed"), _paths(report["inputs"].get("replayed"))),
        ("recorded", _paths(report["inputs"].get("recorded"))),
    ]
    if (shadow := report.get("shadow")) is not None:  # one capture holds both sides
        rows = [
            ("production", settings.get("upstream")),
            ("shadow", shadow["target"]),
            ("capture", _paths(report["inputs"].get("replayed"))),
        ]
    rows += [
        ("date", _date(settings.get("created_ns"))),
        ("tailreplay", settings.get("tool_version")),
        ("command line", shlex.join(header.command) if header.command else None),
        ("--speed", header.speed),
        ("--amplify", f"{header.amplify:g}x" if header.amplify is not None else None),
        ("--tail-stretch", _tail_setting(header)),
        ("--seed", str(header.seed) if header.seed is not None else None),
    ]
    t.rows = [[label, value] for label, value in rows if value]
    tail = tail_line(report)
    if tail:
        t.note = tail
    return t


def tail_line(report: Report) -> str:
    """One line on the tail stretch where its requests are counted; "" when none was."""
    header = ReplayHeader.read(report["replay"])
    stretched = report["overall"]["replayed"]["tail"]
    if not stretched or header.tail_stretch in (None, 1):
        return ""
    quantile = _quantile(header)
    return (
        f"tail-stretched: {stretched:,} {'request' if stretched == 1 else 'requests'} at or "
        f"above the recorded {quantile} sent with {header.tail_stretch:g}x the output "
        "budget (--tail-stretch), slower by design; the per-request tables show them "
        "marked, and the figures without them"
    )


def _target(report: Report, header: ReplayHeader) -> str | None:
    """The URL replayed at, or the built-in simulator that was started."""
    if not is_replay(report):
        return None
    upstream = report["replay"].get("upstream")
    if upstream is None and header.builtin is not None:
        return f"the built-in simulator ({header.builtin})"
    return str(upstream) if upstream is not None else None


def _tail_setting(header: ReplayHeader) -> str | None:
    if header.tail_stretch is None:
        return None
    if header.tail_stretch == 1:
        return "off"
    quantile = _quantile(header)
    return f"x{header.tail_stretch:g} at or above the recorded {quantile}"


def _quantile(header: ReplayHeader) -> str:
    """Where the run's tail started; a header without it had the default."""
    quantile = header.tail_quantile if header.tail_quantile is not None else TAIL_QUANTILE.value()
    return f"P{100 * quantile:g}"


def _paths(paths: list[str] | None) -> str | None:
    if not paths:
        return None
    shown = ", ".join(paths[:3])
    return shown + (f" and {len(paths) - 3:,} more" if len(paths) > 3 else "")


def _date(created_ns: object) -> str | None:
    if type(created_ns) is not int:
        return None
    return datetime.fromtimestamp(created_ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
