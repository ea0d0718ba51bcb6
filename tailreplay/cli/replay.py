"""``tailreplay replay`` (also the ``replay`` command): replay archives at a target."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tailreplay.cli.command_line import shown_command
from tailreplay.cli.echo import say, show
from tailreplay.cli.handling import ARGV
from tailreplay.cli.option_fields import declared_options, take
from tailreplay.cli.options import otlp_from_params, otlp_options
from tailreplay.cli.sim import builtin_sim
from tailreplay.errors import InputError
from tailreplay.output_path import is_stdout, write_output
from tailreplay.replayer.replay_summary import ReplaySummary
from tailreplay.studies.replay_args import ReplayArgs
from tailreplay.version import __version__

if TYPE_CHECKING:
    from tailreplay.replayer.config import ReplayConfig
    from tailreplay.replayer.run import ReplayOutcome
    from tailreplay.report.write import ReportOptions, ReportResult

__all__ = ["parse_replay_args", "replay"]


@click.command(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="""\b
Examples:
  replay --speed 2x capture.msgpack               # against the built-in simulator
  replay --target http://staging:8000/v1 --header "Authorization: Bearer $KEY" \\
         --speed 1x..4x --report report.html --slo 'latency:p99<=2x' capture.msgpack
  replay --dry-run --out schedule.msgpack capture.msgpack

Exit codes: 0 done (and SLOs met), 1 failed or SLO missed, 2 usage, 3 unreadable
input, 130 interrupted.""",
)
@click.version_option(__version__, prog_name="replay")
@declared_options(ReplayArgs)
@otlp_options()
def replay(**options: Any) -> None:
    """Replay archives at a target with the recorded arrivals, dilated, and the tail stretched."""
    args = take(ReplayArgs, options)
    args = replace(args, otlp=options["otlp"])
    config, outcome = _run(args)
    from tailreplay.replayer.summary import summary_lines
    from tailreplay.report.write import fail_on_slo

    out = say if is_stdout(args.json_out) else show  # with --json -, stdout is the JSON's
    for line in summary_lines(outcome.summary):
        out(line)  # the target's error messages among them
    out(f"results: {config.out}")
    if outcome.aborted:
        say(f"Error: {outcome.aborted}")
    if outcome.results_lost:
        say(f"Error: {outcome.results_lost}")
    assert config.out is not None
    result = _judged(args, config.out, outcome)
    code = outcome.exit_code
    if result is not None and code == 0:
        fail_on_slo(result)
    if code:
        sys.exit(code)


def _run(args: ReplayArgs) -> tuple[ReplayConfig, ReplayOutcome]:
    """The run; Ctrl-C before it could take over says so and exits 130."""
    try:
        # Imported here, inside the Ctrl-C guard: on a busy machine they take a while.
        from tailreplay.studies.replay import claim_results, replay_config, run_replay

        builtin = None
        if args.target is None:
            builtin = builtin_sim(args.sim_profile, args.seed, args.sim_args)
        # Held until the run ends: a second replay given the same --out is refused.
        with claim_results(args) as out:
            config = replay_config(args, builtin, out, live=sys.stderr.isatty())
            given = click.get_current_context().meta.get(ARGV, sys.argv)  # standalone: argv
            config = replace(config, command=shown_command(given))
            return config, run_replay(config, args.workers, say)
    except KeyboardInterrupt:
        # Before the replay could take over Ctrl-C: nothing sent.
        if args.json_out is not None:
            write_json(args.json_out, ReplaySummary.before_start_json())
        click.echo("interrupted before the first request was sent", err=True)
        sys.exit(130)


def _judged(args: ReplayArgs, results: Path, outcome: ReplayOutcome) -> ReportResult | None:
    """The report when asked for (``--report``, or ``--slo``), and the ``--json`` summary
    with the gate's verdict; the summary is written even when the report fails."""
    from tailreplay.report.write import slo_verdict
    from tailreplay.studies.replay import report_options, summary_document

    result = None
    try:
        if args.report_out is not None or (args.slos and args.slo_report):
            options = replace(report_options(args, results), slo_stop=outcome.summary.slo_stop)
            result = report_after(options, args.report_out, args.json_out)
    finally:
        if args.json_out is not None:
            verdict = slo_verdict(result) if result is not None else None
            write_json(args.json_out, summary_document(outcome.summary, verdict))
    return result


def parse_replay_args(argv: list[str]) -> ReplayArgs:
    """``replay``'s arguments as the command parses them (a wrong one raises click's
    usage error, as on the command line)."""
    ctx = replay.make_context("replay", list(argv))
    params = dict(ctx.params)
    otlp = otlp_from_params(params)
    return replace(take(ReplayArgs, params), otlp=otlp)


# What replay writes after its run: the summary as JSON (--json) and the report of
# recorded against replayed (--report, --slo).


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
