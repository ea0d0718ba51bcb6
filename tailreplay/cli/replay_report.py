"""What ``replay`` writes after its run: the summary as JSON (``--json``) and the
report of recorded against replayed (``--report``, ``--slo``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tailreplay.errors import InputError
from tailreplay.private import write_whole

if TYPE_CHECKING:
    from tailreplay.report.write import ReportOptions, ReportResult

__all__ = ["report_after", "write_json"]


def write_json(path: Path, summary: dict[str, Any]) -> None:
    try:
        write_whole(path, json.dumps(summary, indent=2) + "\n")
    except OSError as exc:  # the results archive is written; say so rather than lose it
        raise InputError(f"--json {path}: cannot write ({exc.strerror or exc})") from None


def report_after(options: ReportOptions, path: Path | None) -> ReportResult:
    """The report of the run just done; the SLO lines on stdout, and the file's name
    when one was written (``path``, already in ``options``)."""
    # Imported on use: every command imports this module, few write a report.
    from tailreplay.report.tables import slo_tables
    from tailreplay.report.terminal import print_report
    from tailreplay.report.write import write_report

    result = write_report(options, say=lambda line: click.echo(line, err=True))
    print_report(result.headline, slo_tables(result.slo) if result.slo else [])
    if path is not None:
        click.echo(f"report: {path}")
    return result
