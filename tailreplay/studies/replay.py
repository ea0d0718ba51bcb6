"""One replay as the command line and the Python API run it: ``ReplayArgs`` checked
and composed into the replayer's ``ReplayConfig`` (with the built-in simulator, the
span exporter and the SLO watch it takes from the packages beside it), run in one
process or several, and the report's options for judging it after."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import fields
from pathlib import Path
from typing import Any

from tailreplay import eventloop
from tailreplay.declared import default_of
from tailreplay.errors import InputError, UsageError
from tailreplay.exporters.span_process import replay_spans
from tailreplay.http.header_rules import header_problem
from tailreplay.output_path import check_output_file, into_folder, write_output
from tailreplay.prometheus import check_listen
from tailreplay.replayer.config import ReplayConfig, SpanFactory
from tailreplay.replayer.local_shards import run_workers
from tailreplay.replayer.replay_summary import ReplaySummary
from tailreplay.replayer.request import BodyEdits
from tailreplay.replayer.retry import RetryPolicy
from tailreplay.replayer.run import ReplayOutcome, run
from tailreplay.replayer.schedule import ScheduleConfig, TailCost
from tailreplay.report.model import SloVerdict
from tailreplay.report.slo import check_judgeable
from tailreplay.report.write import ReportOptions
from tailreplay.result_file import claimed, default_result
from tailreplay.sim.launcher import BuiltinSim
from tailreplay.sim.profiles import EngineProfile
from tailreplay.studies.replay_args import ReplayArgs
from tailreplay.studies.target_setup import target_model
from tailreplay.studies.watched_objectives import slo_stop_config
from tailreplay.traces.archive.ops import time_window
from tailreplay.traces.archive.reader import ArchiveReader

__all__ = [
    "REPORT_KINDS",
    "claim_results",
    "replay_config",
    "report_options",
    "run_replay",
    "send_headers",
    "summary_document",
    "write_summary",
]

REPORT_KINDS = {
    ".html": "html_out",
    ".htm": "html_out",
    ".md": "markdown_out",
    ".json": "json_out",
}
"""``--report``'s file kinds by suffix: the ``ReportOptions`` field each one sets."""

_HEADER_ENV = "TAILREPLAY_HEADER_"


def claim_results(args: ReplayArgs) -> AbstractContextManager[Path]:
    """The run's result archive, held for it (``tailreplay/result_file.py``): ``--out``
    (an existing one only with ``--overwrite``), or a name made in the folder ``--out``
    names, or in ./replays/; its path is what the block gets.

    >>> with claim_results(args) as out: run_replay(replay_config(args, None, out), 1, print)
    """
    if args.out is not None and not into_folder(args.out):
        return claimed(args.out, overwrite=args.overwrite, inputs=args.archives)
    return claimed(default_result(args.dry_run, args.out), numbered=True)


def replay_config(
    args: ReplayArgs, builtin: BuiltinSim | None, out: Path, *, live: bool = False
) -> ReplayConfig:
    """The replay ``args`` describe, its results written to ``out``, against ``builtin``
    when there is no ``--target``; every refusal (bad files, clashing flags) first.
    ``live``: a progress display that rewrites its line (a terminal)."""
    ArchiveReader(args.archives, skip_corrupt=args.skip_corrupt)  # bad files fail here: exit 3
    start_ns, end_ns = time_window(
        args.archives, args.from_, args.to, skip_corrupt=args.skip_corrupt
    )
    _check_outputs(args)
    if args.slos:
        check_judgeable(args.slos, args.archives, skip_corrupt=args.skip_corrupt)
    if args.target is not None and args.sim_args:
        raise UsageError("--sim-arg sets up the built-in simulator, which --target replaces")
    model = target_model(builtin if args.target is None else None, args.tail_cost, args.max_context)
    if args.metrics_listen is not None:
        check_listen(*args.metrics_listen, "--metrics-listen")
    return ReplayConfig(
        schedule=_schedule(args, start_ns, end_ns, model.tail_cost, model.max_context),
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
        offline=args.offline,
        builtin_target=model.builtin,
        live=live,
        spans=_spans(args),
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
        slo_stop=slo_stop_config(
            args.slo_stop,
            args.slos,
            sharded=args.workers > 1 or args.shard[1] > 1,
            closed_loop=args.users is not None,
            retries=args.retries == "policy",
            min_score=args.slo_min_score,
        ),
    )


def _schedule(
    args: ReplayArgs,
    start_ns: int | None,
    end_ns: int | None,
    tail_cost: TailCost,
    max_context: int | None,
) -> ScheduleConfig:
    return ScheduleConfig(
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
        tail_cost=tail_cost,
        max_context=max_context,
        spread_ticks=args.spread_ticks,
        tick_placement=args.tick_placement,
        drop_retries=args.retries != "recorded",
        within_s=args.duration if args.users is None else None,
    )


def _spans(args: ReplayArgs) -> SpanFactory | None:
    """The span exporter of ``--otlp-*``, bound for the run's process (picklable)."""
    if not args.otlp.enabled:
        return None
    return functools.partial(replay_spans, args.otlp, {"tailreplay.replay.speed": str(args.speed)})


def _check_outputs(args: ReplayArgs) -> None:
    """Refuse clashing options and unwritable outputs before any work."""
    if args.report_out is not None and args.report_out.suffix.lower() not in REPORT_KINDS:
        raise UsageError(f"--report {args.report_out}: name a .html, .md or .json file")
    if args.dry_run and (args.report_out or args.slos):
        raise UsageError("--report and --slo need a real run, not --dry-run")
    if args.offline:
        _check_offline(args)
    if args.users is not None and (
        str(args.speed) != "1x" or args.amplify != 1 or args.workers > 1 or args.dry_run
    ):
        raise UsageError(
            "--users: the users set the rate, so --speed, --amplify, --workers "
            "and --dry-run do not apply"
        )
    # When the run starts, not at parse time: the paths may name folders of the
    # machine that runs it (deploy/ parses its manifests' arguments elsewhere).
    folder = args.out is not None and into_folder(args.out)  # a name is made in it
    for flag, path in (
        ("--out", None if folder else args.out),
        ("--json", args.json_out),
        ("--report", args.report_out),
    ):
        if path is not None:
            check_output_file(flag, path, inputs=args.archives)


def _check_offline(args: ReplayArgs) -> None:
    """``--offline`` serves the schedule in-process: what needs a target or a live run
    is refused."""
    clashing = [
        flag
        for flag, given in (
            ("--target", args.target is not None),
            ("--dry-run", args.dry_run),
            ("--users", args.users is not None),
            ("--workers", args.workers > 1),
            ("--shard", args.shard[1] > 1),
            ("--scrape", bool(args.scrapes)),
            ("--metrics-listen", args.metrics_listen is not None),
            ("--otlp-endpoint", args.otlp.enabled),
            ("--retries policy", args.retries == "policy"),
        )
        if given
    ]
    # What the live client does to a request, which the offline path has no part of.
    clashing += [
        flags for name, flags in _LIVE_ONLY if getattr(args, name) != default_of(ReplayArgs, name)
    ]
    clashing += [a.split("=")[0] for a in args.sim_args if not _offline_sim_arg(a)]
    if clashing:
        raise UsageError(
            f"--offline serves the replay in this process, on a virtual clock: "
            f"{', '.join(clashing)} need a live run"
        )


_LIVE_ONLY = (
    ("max_inflight", "--max-inflight"),
    ("timeout", "--timeout"),
    ("model_maps", "--model-map"),
    ("body_sets", "--body-set"),
    ("body_drops", "--body-drop"),
    ("force_lengths", "--no-force-lengths"),
    ("client_aborts", "--client-aborts"),
    ("slo_stop", "--slo-stop"),
)
_OFFLINE_UNMODELLED = ("reasoning_share", "reasoning_tokens", "spec_tokens")
"""Profile fields the offline engine does not serve as the simulator's server does
(reasoning text, draft acceptance by the prompt's entropy)."""


def _offline_sim_arg(arg: str) -> bool:
    """A ``--sim-arg`` the offline engine honours: ``--profile`` or a profile field it
    models, each as ``--flag=value``."""
    flag = arg.split("=", 1)[0]
    name = flag.removeprefix("--").replace("-", "_")
    known = {f.name for f in fields(EngineProfile)} - set(_OFFLINE_UNMODELLED)
    return "=" in arg and (flag == "--profile" or name in known)


def send_headers(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Headers a replay sends: staging credentials from the environment
    (TAILREPLAY_HEADER_AUTHORIZATION=...), then --header, which wins whatever the
    case of its name (one header each, by ``tailreplay/http/header_rules.py``)."""
    by_name: dict[str, tuple[str, str]] = {}
    variables: dict[str, str] = {}
    for key, raw in sorted(os.environ.items()):
        if key.startswith(_HEADER_ENV) and len(key) > len(_HEADER_ENV):
            name, value = key[len(_HEADER_ENV) :].replace("_", "-").title(), raw.strip()
            if (problem := header_problem(name, value)) is not None:
                raise UsageError(f"{key}: {problem}")
            if (other := variables.get(name.lower())) is not None:
                raise UsageError(f"{other} and {key} name one header, {name}: set one")
            variables[name.lower()] = key
            by_name[name.lower()] = (name, value)
    for name, value in pairs:  # checked as --header was parsed
        by_name[name.lower()] = (name, value)
    return dict(by_name.values())


def run_replay(config: ReplayConfig, workers: int, say: Callable[[str], None]) -> ReplayOutcome:
    """Run ``config`` in this process, or spread over ``workers`` processes."""
    if workers > 1:
        return run_workers(config, workers, say)
    return eventloop.run(run(config, say), config.event_loop)


def summary_document(summary: ReplaySummary, verdict: SloVerdict | None) -> dict[str, Any]:
    """``--json``'s document: the run's summary, and with ``--slo`` the gate's verdict."""
    return {**summary.to_json(), **({"slo": verdict} if verdict else {})}


def write_summary(path: Path, summary: ReplaySummary, verdict: SloVerdict | None) -> None:
    """``--json``'s document to ``path`` (``-``: stdout), whole. ``InputError`` (exit 3)
    when it cannot be written: the results are written already, and the line says so."""
    try:
        write_output(path, json.dumps(summary_document(summary, verdict), indent=2) + "\n")
    except OSError as exc:
        raise InputError(f"--json {path}: cannot write ({exc.strerror or exc})") from None


def report_options(args: ReplayArgs, results: Path) -> ReportOptions:
    """The report of a run's ``results`` against what it replayed, judged by its
    ``--slo`` options, written where ``--report`` says (its kind by the suffix)."""
    options = ReportOptions(
        replayed=[results],
        recorded=list(args.archives),
        objectives=args.slos,
        min_score=args.slo_min_score,
        slo_by=args.slo_by,
        slo_window_s=args.slo_window,
        skip_corrupt=args.skip_corrupt,
    )
    if args.report_out is not None:
        setattr(options, REPORT_KINDS[args.report_out.suffix.lower()], args.report_out)
    return options
