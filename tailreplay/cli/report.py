"""``tailreplay report``: recorded against replayed, with an SLO gate for CI."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tailreplay.cli.echo import say
from tailreplay.cli.options import (
    FILE_OUT,
    KEY_VALUE,
    archive_args,
    archive_paths,
    buckets_option,
    output_file,
    seed_option,
    skip_corrupt_option,
    slo_options,
)
from tailreplay.errors import UsageError
from tailreplay.output_path import is_stdout

if TYPE_CHECKING:
    from tailreplay.report.slo import Objective

__all__ = ["report"]


def _out(name: str, help_text: str) -> click.Option:
    return click.Option(
        [f"--{name}"],
        type=FILE_OUT,
        callback=output_file,
        help=help_text,
    )


@click.command(
    params=[
        _out("json", "Write the whole report (every figure) as JSON here."),
        _out("markdown", "Write the tables as Markdown here (for a PR comment)."),
        _out("html", "Write one HTML page with the tables and plots here."),
        _out("deltas", "Write one CSV row per replayed request with its recorded original."),
    ]
)
@archive_args("replayed")
@click.option(
    "--recorded",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=True),
    callback=archive_paths,
    help="The recorded archive(s); default: those the replay's header names.",
)
@click.option("--replay-only", is_flag=True, help="Report the replay alone, no recorded side.")
@click.option(
    "--shadow",
    is_flag=True,
    help="The archive is a capture made with proxy --shadow: compare the shadow's answers "
    "with production's on the same requests.",
)
@slo_options
@click.option(
    "--judge-partial",
    is_flag=True,
    help="Judge the SLO of a replay cut short (Ctrl-C, --fail-fast, --slo-stop) on the "
    "requests it sent; without it, such a run is not judged (exit 4).",
)
@buckets_option
@skip_corrupt_option
@seed_option("Seed of the bootstrap draws.")
@click.option(
    "--thresholds",
    type=KEY_VALUE,
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a finding's threshold on the target's metrics (repeatable): waiting=50, "
    "running=8, kv_cache=0.92, hit_rate=0.65, long_input=2048, latency_rise=1.5.",
)
def report(
    replayed: tuple[Path, ...],
    recorded: tuple[Path, ...],
    replay_only: bool,
    shadow: bool,
    slos: list[Objective],
    slo_min_score: float,
    slo_by: str | None,
    slo_window: float | None,
    judge_partial: bool,
    buckets: list[int],
    skip_corrupt: bool,
    seed: int,
    thresholds: tuple[tuple[str, str], ...],
    json: Path | None,
    markdown: Path | None,
    html: Path | None,
    deltas: Path | None,
) -> None:
    """Compare a replay with what was recorded: percentiles, buckets, SLOs, deltas
    (with --shadow, a shadowed capture's shadow with its production).

    Exit codes: 0 report written (SLOs met), 1 an SLO missed, 2 bad options,
    3 an unreadable archive, 4 the SLO not judged (the client was the bottleneck, or
    the run was cut short).
    """
    from tailreplay.report.engine_findings import parse_thresholds
    from tailreplay.report.terminal import print_report, stderr_console
    from tailreplay.report.write import ReportOptions, fail_on_slo, write_report

    if replay_only and recorded:
        raise UsageError("--replay-only and --recorded contradict each other")
    if shadow and (replay_only or recorded):
        raise UsageError("--shadow compares a capture with itself: no --recorded or --replay-only")
    options = ReportOptions(
        replayed=list(replayed),
        recorded=[] if replay_only else (list(recorded) or None),
        shadow=shadow,
        objectives=slos,
        min_score=slo_min_score,
        slo_by=slo_by,
        slo_window_s=slo_window,
        judge_partial=judge_partial,
        buckets=buckets,
        json_out=json,
        markdown_out=markdown,
        html_out=html,
        deltas_out=deltas,
        skip_corrupt=skip_corrupt,
        seed=seed,
        thresholds=parse_thresholds(thresholds),
    )
    result = write_report(options, say=say)
    # With --json -, stdout holds the document alone.
    print_report(
        result.headline, result.tables, console=stderr_console() if is_stdout(json) else None
    )
    fail_on_slo(result)
