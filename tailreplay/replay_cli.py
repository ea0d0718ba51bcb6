"""``tailreplay replay`` (also the ``replay`` command): replay archives at a target."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tailreplay.errors import InputError, UsageError
from tailreplay.exporters.otlp import OtlpOptions
from tailreplay.otlp_cli import otlp_options
from tailreplay.output_path import check_output_file
from tailreplay.slo_cli import slo_options
from tailreplay.units import parse_duration, parse_host_port, parse_time

if TYPE_CHECKING:
    from tailreplay.replayer.request import BodyEdits
    from tailreplay.report.slo import Objective
    from tailreplay.report.write import ReportResult

__all__ = ["main", "replay"]


def _factor(text: str, flag: str) -> float:
    t = text.strip().lower().rstrip("x")
    try:
        value = float(t)
    except ValueError:
        raise UsageError(f"invalid {flag} {text!r}: use e.g. 3x or 1.5x") from None
    if value <= 0:
        raise UsageError(f"invalid {flag} {text!r}: must be positive")
    return value


def _headers(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    # Staging credentials from the environment: TAILREPLAY_HEADER_AUTHORIZATION=...
    for key, value in os.environ.items():
        if key.startswith("TAILREPLAY_HEADER_") and len(key) > len("TAILREPLAY_HEADER_"):
            out[key[len("TAILREPLAY_HEADER_") :].replace("_", "-").title()] = value
    for pair in pairs:
        name, sep, value = pair.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"invalid --header {pair!r}: use 'Name: value'")
        out[name.strip()] = value.strip()
    return out


def _body_edits(sets: tuple[str, ...], drops: tuple[str, ...]) -> BodyEdits | None:
    from tailreplay.replayer.request import BodyEdits

    if not sets and not drops:
        return None
    assign: dict[str, Any] = {}
    for item in sets:
        key, sep, text = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise UsageError(f"invalid --body-set {item!r}: use KEY=VALUE, e.g. temperature=0")
        try:
            assign[key] = json.loads(text)
        except ValueError:
            assign[key] = text  # a bare word is a string: --body-set user=replay
    for key in drops:
        if not key or any(not part for part in key.split(".")):
            raise UsageError(f"invalid --body-drop {key!r}: give a key, e.g. tools")
    return BodyEdits(assign=assign, drop=tuple(drops))


def _pairs(items: tuple[str, ...], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        a, sep, b = item.partition("=")
        if not sep or not a or not b:
            raise UsageError(f"invalid {flag} {item!r}: use A=B")
        out[a] = b
    return out


def _shard(text: str) -> tuple[int, int]:
    i, sep, n = text.partition("/")
    if not sep or not i.isdigit() or not n.isdigit() or int(n) < 1 or int(i) >= int(n):
        raise UsageError(f"invalid --shard {text!r}: use i/N with 0 <= i < N, e.g. 0/4")
    return int(i), int(n)


@click.command()
@click.argument("archives", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--target", help="Base URL to replay at (default: the built-in simulator).")
@click.option("--speed", default="1x", show_default=True, help="2x, 200%, 0.5x, or a ramp 1x..4x.")
@click.option(
    "--amplify",
    default="1x",
    show_default=True,
    help="Send N copies of each request (e.g. 3x, 1.5x).",
)
@click.option(
    "--tail-stretch", default=1.8, show_default=True, help="Output budget factor for the tail."
)
@click.option("--tail-quantile", default=0.99, show_default=True, help="Where the tail starts.")
@click.option(
    "--force-lengths/--no-force-lengths",
    default=True,
    show_default=True,
    help="Send min_tokens and ignore_eos so the target generates exactly the budget.",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    help="'Name: value' to send (repeatable); also TAILREPLAY_HEADER_<NAME>.",
)
@click.option(
    "--model-map", "model_maps", multiple=True, help="A=B: send model B where A was recorded."
)
@click.option(
    "--body-set",
    "body_sets",
    multiple=True,
    help="KEY=VALUE to set in every JSON body, last of all (repeatable); VALUE is JSON "
    "(0, true, {...}) or else a string; KEY may be dotted, e.g. stream_options.include_usage.",
)
@click.option(
    "--body-drop", "body_drops", multiple=True, help="KEY to remove from every JSON body."
)
@click.option("--max-inflight", default=4096, show_default=True)
@click.option("--connections", default=1024, show_default=True)
@click.option("--timeout", default="300s", show_default=True)
@click.option("--limit", type=int, default=None, help="Replay only the first N records.")
@click.option("--from", "from_", help="Start of the window (ISO-8601, unix s, or +DURATION).")
@click.option("--to", help="End of the window (exclusive).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Result archive (default replays/replay-<UTC>.msgpack).",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path),
    help="Write the summary as JSON here.",
)
@click.option(
    "--shard", default="0/1", show_default=True, help="i/N: replay this shard of the trace ids."
)
@click.option("--start-at", help="Common start (ISO-8601 or unix s) for sharded replays.")
@click.option(
    "--allow-upstream", is_flag=True, help="Allow replaying at the captured upstream itself."
)
@click.option(
    "--new-trace-ids", is_flag=True, help="Start new traces instead of spans in the recorded ones."
)
@click.option(
    "--dry-run", is_flag=True, help="Write the schedule as a result archive; send nothing."
)
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--sim-profile",
    default="fast",
    show_default=True,
    help="Profile of the built-in simulator when there is no --target (fast: an H100-class "
    "deployment, which production traces like the shipped peak need).",
)
@click.option("--skip-corrupt", is_flag=True)
@click.option(
    "--metrics-listen", help="HOST:PORT to serve Prometheus metrics on while the replay runs."
)
@click.option(
    "--metrics-linger",
    default="0s",
    show_default=True,
    help="Keep serving metrics this long after the run, so the last scrape sees the end.",
)
@click.option(
    "--report",
    "report_out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="After the run, write the report (recorded against replayed) here: .html, .md "
    "or .json by the suffix. Also written after Ctrl-C.",
)
@slo_options
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Processes on this machine, one shard each, merged into one result "
    "(one process sends ~4,000 requests/s).",
)
@otlp_options()
def replay(
    archives: tuple[Path, ...],
    target: str | None,
    speed: str,
    amplify: str,
    tail_stretch: float,
    tail_quantile: float,
    force_lengths: bool,
    headers: tuple[str, ...],
    model_maps: tuple[str, ...],
    body_sets: tuple[str, ...],
    body_drops: tuple[str, ...],
    max_inflight: int,
    connections: int,
    timeout: str,
    limit: int | None,
    from_: str | None,
    to: str | None,
    out: Path | None,
    json_out: Path | None,
    shard: str,
    start_at: str | None,
    allow_upstream: bool,
    new_trace_ids: bool,
    dry_run: bool,
    seed: int,
    sim_profile: str,
    skip_corrupt: bool,
    metrics_listen: str | None,
    metrics_linger: str,
    report_out: Path | None,
    slos: tuple[str, ...],
    slo_min_score: float,
    workers: int,
    otlp: OtlpOptions,
) -> None:
    """Replay archives at a target with the recorded arrivals, dilated, and the tail stretched."""
    from tailreplay.replayer.run import ReplayConfig, exit_code, print_summary, run, write_json
    from tailreplay.replayer.schedule import ScheduleConfig
    from tailreplay.replayer.speed import parse_speed
    from tailreplay.report.slo import parse_objectives
    from tailreplay.report.write import fail_on_slo
    from tailreplay.traces.reader import ArchiveReader

    if not 0 < tail_quantile < 1:
        raise UsageError("--tail-quantile must be between 0 and 1")
    if tail_stretch < 1:
        raise UsageError("--tail-stretch must be at least 1 (1 turns it off)")
    if max_inflight < 1 or connections < 0:
        raise UsageError("--max-inflight must be at least 1 and --connections not negative")
    if target is not None:
        from tailreplay.proxy_cli import parse_upstream

        target = str(parse_upstream(target, "--target")).rstrip("/")
    ArchiveReader(archives, skip_corrupt=skip_corrupt)  # bad files fail here, with exit 3
    origin = None
    if any(t and t.strip().startswith("+") for t in (from_, to)):
        from tailreplay.traces.columns import load_columns

        starts = load_columns(archives, [])["start_ns"]
        origin = int(starts[0]) if starts.size else None
    schedule = ScheduleConfig(
        paths=archives,
        speed=parse_speed(speed),
        amplify=_factor(amplify, "--amplify"),
        tail_stretch=tail_stretch,
        tail_quantile=tail_quantile,
        start_ns=parse_time(from_, origin_ns=origin) if from_ else None,
        end_ns=parse_time(to, origin_ns=origin) if to else None,
        limit=limit,
        shard=_shard(shard),
        seed=seed,
        skip_corrupt=skip_corrupt,
    )
    if (
        out is not None
        and out.exists()
        and any(a.exists() and os.path.samefile(a, out) for a in archives)
    ):
        raise UsageError(f"{out}: the output is also an input; choose another --out")
    objectives = parse_objectives(slos)
    if report_out is not None and report_out.suffix.lower() not in _REPORT_KINDS:
        raise UsageError(f"--report {report_out}: name a .html, .md or .json file")
    if dry_run and (report_out or objectives):
        raise UsageError("--report and --slo need a real run, not --dry-run")
    # In the command, not a parse-time callback: the paths may name folders of the
    # machine that runs it (deploy/ parses its manifests' arguments elsewhere).
    for flag, path in (("--out", out), ("--json", json_out), ("--report", report_out)):
        if path is not None:
            check_output_file(flag, path)
    if out is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        Path("replays").mkdir(exist_ok=True)
        out = Path("replays") / f"replay-{stamp}{'-dry' if dry_run else ''}.msgpack"
    config = ReplayConfig(
        schedule=schedule,
        target=target,
        force_lengths=force_lengths,
        headers=_headers(headers),
        model_map=_pairs(model_maps, "--model-map"),
        body_edits=_body_edits(body_sets, body_drops),
        max_inflight=max_inflight,
        connections=connections,
        timeout_s=parse_duration(timeout),
        out=out,
        json_out=json_out,
        start_at_ns=parse_time(start_at) if start_at else None,
        allow_upstream=allow_upstream,
        new_trace_ids=new_trace_ids,
        dry_run=dry_run,
        sim_args=("--profile", sim_profile, "--seed", str(seed)),
        live=sys.stderr.isatty(),
        otlp=otlp,
        metrics_listen=parse_host_port(metrics_listen, "--metrics-listen")
        if metrics_listen
        else None,
        metrics_linger_s=parse_duration(metrics_linger),
    )

    def say(line: str) -> None:
        click.echo(line, err=True)

    if workers > 1:
        from tailreplay.replayer.workers import run_workers

        outcome = run_workers(config, workers, say)
    else:
        outcome = asyncio.run(run(config, say))
    print_summary(outcome, lambda line: click.echo(line))
    click.echo(f"results: {out}")
    if json_out is not None:
        try:
            write_json(json_out, outcome.summary)
        except OSError as exc:  # the results archive is written; say so rather than lose it
            raise InputError(f"--json {json_out}: cannot write ({exc.strerror or exc})") from None
    code = exit_code(outcome)
    if report_out is not None or objectives:
        result = _report(out, archives, report_out, objectives, slo_min_score, skip_corrupt)
        if code == 0:
            fail_on_slo(result)
    if code:
        sys.exit(code)


_REPORT_KINDS = {".html": "html_out", ".htm": "html_out", ".md": "markdown_out",
                 ".json": "json_out"}  # fmt: skip


def _report(
    results: Path,
    archives: tuple[Path, ...],
    path: Path | None,
    objectives: list[Objective],
    min_score: float,
    skip_corrupt: bool,
) -> ReportResult:
    """The report of the run just done; the SLO lines on stdout, the file if asked."""
    from tailreplay.report.tables import slo_table
    from tailreplay.report.terminal import print_report
    from tailreplay.report.write import ReportOptions, write_report

    options = ReportOptions(
        replayed=[results],
        recorded=list(archives),
        objectives=objectives,
        min_score=min_score,
        skip_corrupt=skip_corrupt,
    )
    if path is not None:
        setattr(options, _REPORT_KINDS[path.suffix.lower()], path)
    result = write_report(options, say=lambda line: click.echo(line, err=True))
    print_report(result.headline, [slo_table(result.slo)] if result.slo else [])
    if path is not None:
        click.echo(f"report: {path}")
    return result


def main() -> None:
    """The ``replay`` console script: ``tailreplay replay`` under a shorter name."""
    from tailreplay.cli import cli

    cli(["replay", *sys.argv[1:]], prog_name="replay")
