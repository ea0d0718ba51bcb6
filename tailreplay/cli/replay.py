"""``tailreplay replay`` (also the ``replay`` command): replay archives at a target."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tailreplay import shared_options as shared
from tailreplay.cli.command_line import shown_command
from tailreplay.cli.echo import say, show
from tailreplay.cli.handling import ARGV
from tailreplay.cli.options import (
    BODY_DROP,
    BODY_SET,
    DURATION,
    FACTOR,
    FILE_OUT,
    HEADER,
    HOST_PORT,
    HTTP_URL,
    MODEL_MAP,
    SHARD,
    SPEED,
    TAIL_COST,
    Parsed,
    archive_args,
    client_options,
    event_loop_option,
    otlp_from_params,
    otlp_options,
    scrape_option,
    setting_option,
    skip_corrupt_option,
    slo_options,
)
from tailreplay.cli.sim import builtin_sim
from tailreplay.errors import InputError
from tailreplay.output_path import is_stdout, write_output
from tailreplay.replayer.replay_summary import ReplaySummary
from tailreplay.replayer.ticks import PLACEMENTS
from tailreplay.sim.profiles import DEFAULT_PROFILE, PROFILES
from tailreplay.studies.replay_args import ReplayArgs
from tailreplay.units import parse_time
from tailreplay.version import __version__

if TYPE_CHECKING:
    from tailreplay.replayer.config import ReplayConfig
    from tailreplay.replayer.run import ReplayOutcome
    from tailreplay.report.write import ReportOptions, ReportResult

__all__ = ["parse_replay_args", "replay"]

F = TypeVar("F", bound=Callable[..., object])

# What replay knows of its target before the run (studies/target_setup.py turns these
# into the pieces the replay takes).
_TARGET_OPTIONS = [
    click.option(
        "--sim-profile",
        type=click.Choice(sorted(PROFILES)),
        default=DEFAULT_PROFILE,
        show_default=True,
        help="Profile of the built-in simulator when there is no --target (as `tailreplay "
        "sim --profile`; fast: an H100-class deployment, which traces like the shipped peak "
        "need). Its context and KV cache are sized to the trace's longest request.",
    ),
    click.option(
        "--sim-arg",
        "sim_args",
        multiple=True,
        help="An argument for the built-in simulator (repeatable; as `tailreplay sim` takes "
        "it), e.g. --sim-arg=--max-model-len=200000; wins over the sizing.",
    ),
    click.option(
        "--tail-cost",
        type=TAIL_COST,
        help="input=MS,output=MS: the cost per token that ranks the tail when the archive "
        "records no latencies [default: the simulator profile's prefill and decode step].",
    ),
    click.option(
        "--max-context",
        type=click.IntRange(min=1),
        help="The target's context in tokens: a tail budget is cut so input + output fits.",
    ),
]


def target_options(f: F) -> F:
    """``--sim-profile``, ``--sim-arg``, ``--tail-cost`` and ``--max-context``."""
    for option in reversed(_TARGET_OPTIONS):
        f = option(f)
    return f


def slo_stop_option(f: F) -> F:
    """``--slo-stop``, and the hidden ``--no-slo-report`` of callers that judge the
    results themselves (``capacity``: its trials need the stop, not the report)."""
    f = click.option("--no-slo-report", "slo_report", flag_value=False, default=True, hidden=True)(
        f
    )
    return click.option(
        "--slo-stop",
        type=click.Choice(["now", "after-sending"]),
        help="Stop once a --slo objective on latency, TTFT or error rate is missed whatever "
        "the rest of the run does (enough requests already over its limit): now, sending no "
        "more; or after-sending, once the whole schedule is sent. Requests in flight are "
        "cancelled; the exit code is 1.",
    )(f)


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
@archive_args("archives")
@click.option(
    "--target", type=HTTP_URL, help="Base URL to replay at (default: the built-in simulator)."
)
@setting_option(shared.SPEED, type=SPEED)
@click.option(
    "--amplify",
    type=FACTOR,
    default="1x",
    show_default=True,
    help="Send N copies of each request (e.g. 3x, 1.5x).",
)
@click.option(
    "--spread-ticks/--no-spread-ticks",
    default=None,
    help="Spread each tick's requests over the tick when the archive's timestamps were "
    "logged in coarse ticks (1 s, 3 s: many requests share each timestamp), by a draw "
    "from --seed; the count per tick is kept. Default: on when such a clock is detected.",
)
@click.option(
    "--tick-placement",
    type=click.Choice(PLACEMENTS),
    default="random",
    show_default=True,
    help="Where in its tick a spread request goes: random (each at its own draw from "
    "--seed, as requests arriving at random in the tick would) or even (evenly spaced "
    "from a drawn phase: smoother than any real arrival process).",
)
@setting_option(shared.TAIL_STRETCH)
@setting_option(shared.TAIL_QUANTILE)
@click.option(
    "--force-lengths/--no-force-lengths",
    default=True,
    show_default=True,
    help="Send min_tokens and ignore_eos so the target generates exactly the budget.",
)
@click.option(
    "--header",
    "headers",
    type=HEADER,
    multiple=True,
    help="'Name: value' to send (repeatable); also TAILREPLAY_HEADER_<NAME>.",
)
@click.option(
    "--model-map",
    "model_maps",
    type=MODEL_MAP,
    multiple=True,
    help="A=B: send model B where A was recorded.",
)
@click.option(
    "--body-set",
    "body_sets",
    type=BODY_SET,
    multiple=True,
    help="KEY=VALUE to set in every JSON body, last of all (repeatable); VALUE is JSON "
    "(0, true, {...}) or else a string; KEY may be dotted, e.g. stream_options.include_usage.",
)
@click.option(
    "--body-drop",
    "body_drops",
    type=BODY_DROP,
    multiple=True,
    help="KEY to remove from every JSON body.",
)
@click.option(
    "--max-inflight",
    type=click.IntRange(min=1),
    default=4096,
    show_default=True,
    help="Requests in flight at once; one that finds no slot within 100 ms of its due "
    "time is dropped and counted, never sent late.",
)
@click.option(
    "--connections",
    type=click.IntRange(min=0),
    default=1024,
    show_default=True,
    help="Connections to the target at most (0: no limit).",
)
@click.option(
    "--timeout",
    type=DURATION,
    default="300s",
    show_default=True,
    help="Longest a request may take, from sending to its last byte.",
)
@click.option(
    "--duration",
    type=DURATION,
    default=None,
    help="Send only what is due within this much replay time (e.g. 10m); the summary "
    "says how many were never sent.",
)
@click.option(
    "--limit", type=click.IntRange(min=0), default=None, help="Replay only the first N records."
)
@click.option("--from", "from_", help="Start of the window (ISO-8601, unix s, or +DURATION).")
@click.option("--to", help="End of the window (exclusive).")
@click.option(
    "-o",
    "--out",
    "--output",
    "out",
    type=FILE_OUT,
    help="Result archive, or an existing folder to write it in (default "
    "replays/replay-<UTC>.msgpack).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace an existing result archive at --out (else refused, exit 2); never "
    "one another replay is writing.",
)
@click.option("--json", "json_out", type=FILE_OUT, help="Write the summary as JSON here.")
@click.option(
    "--shard",
    type=SHARD,
    default="0/1",
    show_default=True,
    help="i/N: replay this shard of the trace ids.",
)
@click.option(
    "--start-at",
    type=Parsed("time", lambda text, flag: parse_time(text) if text.strip() else None),
    help="Common start (ISO-8601 or unix s) for sharded replays.",
)
@click.option(
    "--allow-upstream", is_flag=True, help="Allow replaying at the captured upstream itself."
)
@click.option(
    "--new-trace-ids", is_flag=True, help="Start new traces instead of spans in the recorded ones."
)
@click.option(
    "--dry-run", is_flag=True, help="Write the schedule as a result archive; send nothing."
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    help="Seed of synthetic prompts, --amplify's copies and the built-in simulator.",
)
@target_options
@skip_corrupt_option
@scrape_option
@client_options
@click.option(
    "--metrics-listen",
    type=HOST_PORT,
    help="HOST:PORT to serve Prometheus metrics on while the replay runs.",
)
@click.option(
    "--metrics-linger",
    type=DURATION,
    default="0s",
    show_default=True,
    help="Keep serving metrics this long after the run, so the last scrape sees the end.",
)
@click.option(
    "--lag-limit",
    type=DURATION,
    default="5ms",
    show_default=True,
    help="Dispatch lag P99 above this means the client, not the target, was the limit: "
    "the run says so and an SLO gate is not judged.",
)
@click.option(
    "--preflight/--no-preflight",
    default=True,
    show_default=True,
    help="Before the schedule starts, send the first request (one output token) and stop "
    "with the cause if the target cannot answer it (down, 404, HTML, 401).",
)
@click.option(
    "--fail-fast",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Stop when the first N results all failed the same way (0: never).",
)
@click.option(
    "--report",
    "report_out",
    type=FILE_OUT,
    help="After the run, write the report (recorded against replayed) here: .html, .md "
    "or .json by the suffix. Also written after Ctrl-C.",
)
@slo_options
@slo_stop_option
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Processes on this machine, one shard each, merged into one result "
    "(one process keeps a 1 ms lag P99 to 5,000-7,000 requests/s on 2 shared cores, "
    "docs/benchmarks.md).",
)
@event_loop_option
@otlp_options()
def replay(**options: Any) -> None:
    """Replay archives at a target with the recorded arrivals, dilated, and the tail stretched."""
    args = ReplayArgs(**options)
    config, outcome = _run(args)
    from tailreplay.replayer.summary import summary_lines
    from tailreplay.report.write import fail_on_slo

    out = say if is_stdout(args.json_out) else show  # with --json -, stdout is the JSON's
    for line in summary_lines(outcome.summary):
        out(line)  # the target's error messages among them
    out(f"results: {config.out}")
    if outcome.aborted:
        say(f"Error: {outcome.aborted}")
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
    params["otlp"] = otlp_from_params(params)
    return ReplayArgs(**params)


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
