"""``tailreplay capacity``: how much more of a recorded window the target serves at the SLO."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tailreplay import shared_options as shared
from tailreplay.cli.echo import say, show
from tailreplay.cli.handling import sigterm_interrupts
from tailreplay.cli.options import (
    DURATION,
    FACTOR,
    FILE_OUT,
    HTTP_URL,
    archive_args,
    scrape_option,
    setting_option,
    write_text,
)
from tailreplay.errors import NotJudged, RunFailed
from tailreplay.output_path import check_output_file, is_stdout
from tailreplay.sim.profiles import DEFAULT_PROFILE, PROFILES

if TYPE_CHECKING:
    from yarl import URL

    from tailreplay.replayer.scrape import ScrapeTarget
    from tailreplay.report.capacity_result import Search
    from tailreplay.studies.capacity import LoadBy

__all__ = ["capacity"]


@click.command(
    epilog="""\b
Example:
  tailreplay capacity capture.msgpack --slo 'latency:p99<=2000ms' --require 2x --json cap.json

Exit codes: 0 a capacity found (at least --require; a search the client cut short
after a pass warns), 1 no capacity (the lowest factor, --min, failed, or the client
was the bottleneck before any pass) or one below --require, 2 usage, 3 unreadable
input, 130 interrupted.""",
)
@archive_args("archives")
@click.option(
    "--target", type=HTTP_URL, help="Base URL (default: a fresh built-in simulator for each trial)."
)
@click.option(
    "--slo",
    "slos",
    multiple=True,
    required=True,
    help="Objectives, as report's: e.g. 'latency:p99<=2000ms,error_rate<=1%'.",
)
@click.option(
    "--by",
    type=click.Choice(["speed", "amplify"]),
    default="speed",
    show_default=True,
    help="Raise the load by replaying faster, or by sending copies.",
)
@click.option(
    "--window",
    type=DURATION,
    default=300.0,
    help="Replay the archive's busiest window this long.  [default: 5m]",
)
@click.option(
    "--max",
    "max_factor",
    type=FACTOR,
    default=16.0,
    help="The highest factor tried.  [default: 16x]",
)
@click.option(
    "--min",
    "min_factor",
    type=FACTOR,
    default=0.25,
    help="The lowest factor the search tries: a target that does not pass there is "
    "reported below it (a full trial there lasts the window's span over the factor; "
    "--sweep starts at 1x).  [default: 0.25x]",
)
@click.option(
    "--precision",
    type=FACTOR,
    default=0.05,
    help="Stop when the first failure is within this of the last pass.  [default: 5%]",
)
@click.option("--require", type=FACTOR, help="Exit 1 unless the capacity is at least this.")
@click.option(
    "--budget",
    type=DURATION,
    default=None,
    help="Wall time after which no trial starts (e.g. 30m): the last pass is then a "
    "lower bound, said in a warning.",
)
@click.option(
    "--repeats",
    type=click.IntRange(0, 5),
    default=1,
    show_default=True,
    help="Replays of an uncertain trial before it counts as not passing.",
)
@click.option(
    "--drain",
    type=DURATION,
    default=10.0,
    help="Wait between trials against a --target.  [default: 10s]",
)
@setting_option(shared.TAIL_STRETCH)
@click.option(
    "--lag-limit",
    type=DURATION,
    default=0.005,
    help="Dispatch lag P99 above this means the client was the bottleneck.  [default: 5ms]",
)
@click.option(
    "--sim-profile",
    type=click.Choice(sorted(PROFILES)),
    default=DEFAULT_PROFILE,
    show_default=True,
    help="Profile of the built-in simulator, as replay's (fast: an H100-class deployment).",
)
@click.option(
    "--sim-arg",
    "sim_args",
    multiple=True,
    metavar="--NAME=VALUE",
    help="Passed to the built-in simulator (repeatable).",
)
@click.option(
    "--out-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("capacity"),
    show_default=True,
    help="Where the window and every trial's results go (one run at a time).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace a previous run's files in --out-dir (else such a folder is refused).",
)
@click.option(
    "--json",
    "json_path",
    type=FILE_OUT,
    help="Write the capacity, its interval and every trial as JSON here.",
)
@click.option(
    "--plot",
    "plot_path",
    type=FILE_OUT,
    help="Write P99 against the factor as an SVG chart here.",
)
@click.option(
    "--sweep",
    type=FACTOR,
    help="Instead of searching, replay the whole window at 1x, 1x + this, 1x + twice "
    "this, ... until one fails: the brute-force baseline (e.g. 0.5x).",
)
@scrape_option
def capacity(
    archives: tuple[Path, ...],
    target: URL | None,
    slos: tuple[str, ...],
    by: LoadBy,
    window: float,
    max_factor: float,
    min_factor: float,
    precision: float,
    require: float | None,
    budget: float | None,
    repeats: int,
    drain: float,
    tail_stretch: float,
    lag_limit: float,
    sim_profile: str,
    sim_args: tuple[str, ...],
    out_dir: Path,
    overwrite: bool,
    json_path: Path | None,
    plot_path: Path | None,
    scrapes: tuple[ScrapeTarget, ...],
    sweep: float | None,
) -> None:
    """Find the largest factor of a recorded window the target serves within the SLO."""
    from tailreplay.report.slo import parse_objectives
    from tailreplay.studies.capacity import CapacityStudy, check_study, run_capacity

    study = CapacityStudy(
        archives,
        tuple(parse_objectives(slos)),
        target=target,
        sim_profile=sim_profile,
        sim_args=sim_args,
        by=by,
        window_s=window,
        min_factor=min_factor,
        max_factor=max_factor,
        precision=precision,
        repeats=repeats,
        drain_s=drain,
        tail_stretch=tail_stretch,
        lag_limit_s=lag_limit,
        scrapes=scrapes,
        sweep_step=sweep,
        out_dir=out_dir,
        budget_s=budget,
        overwrite=overwrite,
    )
    check_study(study)  # makes --out-dir, where the outputs may go: checked after it
    for flag, path in (("--json", json_path), ("--plot", plot_path)):
        if path is not None:
            check_output_file(flag, path, inputs=list(archives))
    with sigterm_interrupts():  # a trial's replay and simulator are stopped with it
        result = run_capacity(study, say)
    _finish(result, json_path, plot_path, require)


def _finish(
    result: Search, json_path: Path | None, plot_path: Path | None, require: float | None
) -> None:
    """The table on stdout; the JSON and the chart where asked; exit 1 when the search
    stopped early or the capacity is under ``require``."""
    from tailreplay.report.capacity_result import coarse_pass, plot, render, to_json

    out = say if is_stdout(json_path) else show  # with --json -, stdout is the JSON's
    for line in render(result):
        out(line)
    if json_path is not None:
        write_text(json_path, json.dumps(to_json(result), indent=1) + "\n")
    if plot_path is not None:
        write_text(plot_path, plot(result) + "\n")
    if result.capacity is None:
        if result.stopped is not None and coarse_pass(result):
            raise NotJudged(
                f"the search stopped before any full replay passed{coarse_pass(result)}: "
                f"{result.stopped}"
            )
        if result.stopped is not None:
            raise NotJudged(f"the search stopped before any trial passed: {result.stopped}")
        lowest = min((t.factor for t in result.trials), default=0.0)
        raise RunFailed(f"no capacity at the SLO: below {lowest:g}x, the lowest factor tried")
    if result.stopped is not None:
        # What passed before the client gave out was measured: a lower bound.
        bound = f"{result.capacity:g}x is a lower bound"
        say(f"warning: the search stopped: {result.stopped}; {bound}")
    if require is not None and result.capacity < require:
        raise RunFailed(f"the capacity ({result.capacity:g}x) is under --require {require:g}x")
