"""What ``replay`` writes after its run: the summary as JSON (``--json``) and the
report of recorded against replayed (``--report``, ``--slo``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tailreplay.errors import InputError
from tailreplay.output_path import is_stdout, write_output

if TYPE_CHECKING:
    from tailreplay.report.write import ReportOptions, ReportResult

__all__ = ["report_after", "write_json"]


def write_json(path: Path, summary: dict[str, Any]) -> None:
    try:
        write_output(path, json.dumps(summary, indent=2) + "\n")
    except OSError as exc:  # the results archive is written; say so rather than lose it
        raise InputError(f"--json {path}: cannot write ({exc.strerror or exc})") from None


def report_after(
    options: ReportOptions, path: Path | None, json_out: Path | None = None
) -> ReportResult:
    """The report of the run just done; the SLO lines on stdout (on stderr when
    ``json_out`` is stdout), and the file's name when one was written (``path``,
    already in ``options``)."""
    # Imported on use: every command imports this module, few write a report.
    from tailreplay.report.tables import slo_tables
    from tailreplay.report.terminal import print_report, stderr_console
    from tailreplay.report.write import write_report

    result = write_report(options, say=lambda line: click.echo(line, err=True))
    to_stderr = is_stdout(json_out)  # stdout holds the --json document alone
    console = stderr_console() if to_stderr else None
    verdict = result.report.get("verdict")
    tables = slo_tables(result.slo, verdict) if result.slo else []
    print_report(result.headline, tables, console)
    if path is not None:
        click.echo(f"report: {path}", err=to_stderr)
    return result
