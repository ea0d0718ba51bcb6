"""``tailreplay replay`` (also the ``replay`` command): replay archives at a target."""

from __future__ import annotations

import functools
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tailreplay import eventloop
from tailreplay.cli.options import (
    BODY_DROP,
    BODY_SET,
    DURATION,
    FACTOR,
    HEADER,
    HOST_PORT,
    HTTP_URL,
    MODEL_MAP,
    SHARD,
    SPEED,
    FiniteRange,
    Parsed,
    client_options,
    event_loop_option,
    otlp_options,
    scrape_option,
    send_headers,
    skip_corrupt_option,
    slo_options,
    time_window,
)
from tailreplay.cli.replay_report import REPORT_KINDS, report_after, write_json
from tailreplay.cli.replay_target import target_model, target_options
from tailreplay.cli.result_file import default_result, drop_if_empty, reserve
from tailreplay.cli.slo_stop import slo_stop_config, slo_stop_option
from tailreplay.errors import UsageError
from tailreplay.output_path import check_output_file
from tailreplay.replayer.replay_summary import ReplaySummary
from tailreplay.studies.replay_args import ReplayArgs
from tailreplay.units import parse_time
from tailreplay.version import __version__

if TYPE_CHECKING:
    from tailreplay.replayer.config import ReplayConfig
    from tailreplay.replayer.run import ReplayOutcome

__all__ = ["replay"]


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
@click.argument("archives", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--target", type=HTTP_URL, help="Base URL to replay at (default: the built-in simulator)."
)
@click.option(
    "--speed",
    type=SPEED,
    default="1x",
    show_default=True,
    help="2x, 200%, 0.5x; a ramp 1x..4x; steps 1x,2x,3x@2m (each the next 2 minutes "
    "of replay time, the last to the end); pulses 1x+10x:5s/60s (5 s at 10x every 60 s).",
)
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
    "--tail-stretch",
    type=FiniteRange(min=1),
    default=1.8,
    show_default=True,
    help="Output budget factor for the tail (1 turns it off).",
)
@click.option(
    "--tail-quantile",
    type=FiniteRange(0, 1, min_open=True, max_open=True),
    default=0.99,
    show_default=True,
    help="Where the tail starts.",
)
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
    "--out",
    type=click.Path(path_type=Path),
    help="Result archive (default replays/replay-<UTC>.msgpack).",
)
@click.option(
    "--json", "json_out", type=click.Path(path_type=Path), help="Write the summary as JSON here."
)
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
    type=click.Path(path_type=Path, dir_okay=False),
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
    reserved: Path | None = None  # the default result file, once created
    try:
        # Imported here, inside the Ctrl-C guard: on a busy machine they take a while.
        from tailreplay.replayer.summary import summary_lines
        from tailreplay.report.write import ReportOptions, fail_on_slo, slo_verdict

        config = _config(args)
        if args.out is None:
            assert config.out is not None
            reserved = reserve(config.out)
            config = replace(config, out=reserved)
        outcome = _run(config, args.workers)
    except BaseException as exc:
        if reserved is not None:
            drop_if_empty(reserved)  # refused before writing: no empty file left behind
        if not isinstance(exc, KeyboardInterrupt):
            raise
        # Before the replay could take over Ctrl-C: nothing sent.
        if args.json_out is not None:
            write_json(args.json_out, ReplaySummary.before_start_json())
        click.echo("interrupted before the first request was sent", err=True)
        sys.exit(130)
    for line in summary_lines(outcome.summary):
        click.echo(line)
    click.echo(f"results: {config.out}")
    if outcome.aborted:
        click.echo(f"Error: {outcome.aborted}", err=True)
    code = outcome.exit_code
    result = None
    try:
        if args.report_out is not None or (args.slos and args.slo_report):
            assert config.out is not None
            report_options = ReportOptions(
                replayed=[config.out],
                recorded=list(args.archives),
                objectives=args.slos,
                min_score=args.slo_min_score,
                slo_by=args.slo_by,
                slo_window_s=args.slo_window,
                skip_corrupt=args.skip_corrupt,
            )
            result = report_after(report_options, args.report_out)
    finally:  # the summary is written even when the report fails
        if args.json_out is not None:
            verdict = slo_verdict(result) if result is not None else None
            write_json(
                args.json_out,
                {**outcome.summary.to_json(), **({"slo": verdict} if verdict else {})},
            )
    if result is not None and code == 0:
        fail_on_slo(result)
    if code:
        sys.exit(code)


def _config(args: ReplayArgs) -> ReplayConfig:
    """The replay the options describe; every refusal (bad files, clashing flags) first."""
    from tailreplay.exporters.span_process import replay_spans
    from tailreplay.prometheus import check_listen
    from tailreplay.replayer.config import ReplayConfig
    from tailreplay.replayer.request import BodyEdits
    from tailreplay.replayer.retry import RetryPolicy
    from tailreplay.replayer.schedule import ScheduleConfig
    from tailreplay.traces.archive.reader import ArchiveReader

    ArchiveReader(args.archives, skip_corrupt=args.skip_corrupt)  # bad files fail here: exit 3
    start_ns, end_ns = time_window(
        args.archives, args.from_, args.to, skip_corrupt=args.skip_corrupt
    )
    out = _check_outputs(args)
    if args.slos:
        from tailreplay.report.slo import check_judgeable

        check_judgeable(args.slos, args.archives, skip_corrupt=args.skip_corrupt)
    model = target_model(
        args.target, args.sim_profile, args.seed, args.sim_args, args.tail_cost, args.max_context
    )
    schedule = ScheduleConfig(
        paths=args.archives,
        speed=args.speed,
        amplify=args.amplify,
        tail_stretch=args.tail_stretch,
        tail_quantile=args.tail_quantile,
        start_ns=start_ns,
        end_ns=end_ns,
        limit=args.limit,
        shard=args.shard,
        seed=args.seed,
        skip_corrupt=args.skip_corrupt,
        tail_cost=model.tail_cost,
        max_context=model.max_context,
        spread_ticks=args.spread_ticks,
        drop_retries=args.retries != "recorded",
    )
    speed_attribute = {"tailreplay.replay.speed": str(args.speed)}
    spans = (
        functools.partial(replay_spans, args.otlp, speed_attribute) if args.otlp.enabled else None
    )
    if args.metrics_listen is not None:
        check_listen(*args.metrics_listen, "--metrics-listen")
    stop = slo_stop_config(
        args.slo_stop,
        args.slos,
        sharded=args.workers > 1 or args.shard[1] > 1,
        closed_loop=args.users is not None,
        retries=args.retries == "policy",
        min_score=args.slo_min_score,
    )
    return ReplayConfig(
        schedule=schedule,
        target=str(args.target).rstrip("/") if args.target is not None else None,
        force_lengths=args.force_lengths,
        headers=send_headers(args.headers),
        model_map=dict(args.model_maps),
        body_edits=BodyEdits.given(args.body_sets, args.body_drops),
        max_inflight=args.max_inflight,
        connections=args.connections,
        timeout_s=args.timeout,
        out=out,
        start_at_ns=args.start_at,
        allow_upstream=args.allow_upstream,
        new_trace_ids=args.new_trace_ids,
        dry_run=args.dry_run,
        builtin_target=model.builtin,
        live=sys.stderr.isatty(),
        spans=spans,
        scrape=list(args.scrapes),
        metrics_listen=args.metrics_listen,
        metrics_linger_s=args.metrics_linger,
        lag_limit_ms=args.lag_limit * 1000,
        preflight=args.preflight,
        fail_fast=args.fail_fast,
        duration_s=args.duration,
        users=args.users,
        think_s=args.think,
        retry=RetryPolicy(args.max_attempts, args.seed) if args.retries == "policy" else None,
        replay_aborts=args.client_aborts == "replay",
        event_loop=eventloop.resolve(args.event_loop),  # uvloop asked for, not there: exit 2
        slo_stop=stop,
    )


def _check_outputs(args: ReplayArgs) -> Path:
    """Refuse clashing options and unwritable outputs before any work; the result
    archive's path."""
    if args.report_out is not None and args.report_out.suffix.lower() not in REPORT_KINDS:
        raise UsageError(f"--report {args.report_out}: name a .html, .md or .json file")
    if args.dry_run and (args.report_out or args.slos):
        raise UsageError("--report and --slo need a real run, not --dry-run")
    if args.users is not None and (
        str(args.speed) != "1x" or args.amplify != 1 or args.workers > 1 or args.dry_run
    ):
        raise UsageError(
            "--users: the users set the rate, so --speed, --amplify, --workers "
            "and --dry-run do not apply"
        )
    # In the command, not a parse-time callback: the paths may name folders of the
    # machine that runs it (deploy/ parses its manifests' arguments elsewhere).
    for flag, path in (
        ("--out", args.out),
        ("--json", args.json_out),
        ("--report", args.report_out),
    ):
        if path is not None:
            check_output_file(flag, path, inputs=args.archives)
    return args.out if args.out is not None else default_result(args.dry_run)


def _run(config: ReplayConfig, workers: int) -> ReplayOutcome:
    def say(line: str) -> None:
        click.echo(line, err=True)

    if workers > 1:
        from tailreplay.replayer.local_shards import run_workers

        return run_workers(config, workers, say)
    from tailreplay.replayer.run import run

    return eventloop.run(run(config, say), config.event_loop)
