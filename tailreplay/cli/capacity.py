"""``tailreplay capacity``: how much more of a recorded window the target serves at the SLO."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tailreplay.cli.echo import say, show
from tailreplay.cli.options import DURATION, FACTOR, HTTP_URL, scrape_option, write_text
from tailreplay.errors import RunFailed, UsageError
from tailreplay.output_path import check_output_file
from tailreplay.sim.profiles import DEFAULT_PROFILE, PROFILES
from tailreplay.studies.watched_objectives import watchable

if TYPE_CHECKING:
    from tailreplay.replayer.scrape import ScrapeTarget
    from tailreplay.report.capacity import Search
    from tailreplay.report.slo import Objective

__all__ = ["capacity"]


@click.command(
    epilog="""\b
Example:
  tailreplay capacity capture.msgpack --slo 'latency:p99<=2000ms' --require 2x --json cap.json

Exit codes: 0 capacity found (at least --require), 1 below --require or the client
was the bottleneck, 2 usage, 3 unreadable input, 130 interrupted.""",
)
@click.argument("archives", nargs=-1, required=True, type=click.Path(path_type=Path))
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
@click.option(
    "--tail-stretch",
    type=click.FloatRange(1.0, 4.0),
    default=1.8,
    show_default=True,
    help="As replay's: the recorded P99's requests get this much more demand.",
)
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
    help="Where the window and every trial's results go.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the capacity, its interval and every trial as JSON here.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path, dir_okay=False),
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
    target: str | None,
    slos: tuple[str, ...],
    by: str,
    window: float,
    max_factor: float,
    min_factor: float,
    precision: float,
    require: float | None,
    repeats: int,
    drain: float,
    tail_stretch: float,
    lag_limit: float,
    sim_profile: str,
    sim_args: tuple[str, ...],
    out_dir: Path,
    json_path: Path | None,
    plot_path: Path | None,
    scrapes: tuple[ScrapeTarget, ...],
    sweep: float | None,
) -> None:
    """Find the largest factor of a recorded window the target serves within the SLO."""
    from tailreplay.report.capacity import judge
    from tailreplay.report.side import load_side
    from tailreplay.report.slo import check_judgeable, parse_objectives
    from tailreplay.studies.capacity_search import COARSE_SHARE, search
    from tailreplay.studies.capacity_search import sweep as brute
    from tailreplay.studies.targets import fresh_simulators
    from tailreplay.studies.trial import longest_request, replay_child

    objectives = parse_objectives(slos)
    check_judgeable(objectives, list(archives))
    _check_options(
        archives, target, (min_factor, max_factor), sim_args, out_dir, json_path, plot_path
    )
    windowed, span_s = _busiest(list(archives), window, out_dir, say)
    fresh: Callable[[int], AbstractContextManager[str]] = (
        (lambda _: contextlib.nullcontext(target))
        if target is not None
        else fresh_simulators(sim_profile, 1.0, sim_args)
    )
    longest = longest_request([windowed])
    recorded = load_side([windowed]) if any(o.relative for o in objectives) else None
    common = ["--tail-stretch", f"{tail_stretch:g}", "--lag-limit", f"{lag_limit * 1e3:g}ms"]
    common += [a for s in scrapes for a in ("--scrape", f"{s.url}@{s.interval_s:g}s")]
    common += _stop_args(objectives) if sweep is None else []
    runs: list[Path] = []

    def run(factor: float, attempt: int, coarse: bool) -> Path:
        kind = "coarse" if coarse else "trial"
        out = out_dir / f"{kind}-{factor:.4g}x-{attempt + 1}.msgpack"
        # A coarse trial replays a quarter of the window's span in replay time (--duration),
        # at any factor: sped up, that is more of the window (all of it from 4x), so
        # the load lasts as long as at 1x and a queue has as long to build.
        part = COARSE_SHARE * span_s
        cut = ["--duration", f"{part:.6g}s"] if coarse else []
        if target is not None and runs:
            time.sleep(drain)  # let the target finish what the last trial left queued
        runs.append(out)
        with fresh(longest) as url:
            replay_child(
                url, windowed, out, [f"--{by}", f"{factor:.6g}x", *common, *cut], ok=(0, 1)
            )
        return out

    trial = lambda f, runs: judge(f, runs, objectives, recorded)  # noqa: E731
    if sweep is not None:
        result = brute(run, trial, step=sweep, max_factor=max_factor, repeats=repeats, say=say)
    else:
        result = search(
            run,
            trial,
            max_factor=max_factor,
            min_factor=min_factor,
            precision=precision,
            repeats=repeats,
            say=say,
        )
    _finish(result, json_path, plot_path, require)


def _stop_args(objectives: list[Objective]) -> list[str]:
    """A search's trial stops waiting for answers once an objective is missed whatever
    they are (a trial far past the limit would wait out its queue); the sweep, the
    brute-force baseline, replays each factor whole. The trial's own report is skipped:
    ``judge`` reads its results."""
    watched = [o.text for o in objectives if watchable(o)]
    if not watched:
        return []
    return ["--slo", ",".join(watched), "--slo-stop", "after-sending", "--no-slo-report"]


def _check_options(
    archives: tuple[Path, ...],
    target: str | None,
    factors: tuple[float, float],
    sim_args: tuple[str, ...],
    out_dir: Path,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    """Bad options refused before any replay; ``--out-dir`` made (outputs may go in it)."""
    if factors[1] <= 1:
        raise UsageError("--max must be above 1x")
    if not 0 < factors[0] < 1:
        raise UsageError("--min must be above 0 and under 1x")
    if target is not None and sim_args:
        raise UsageError("--sim-arg configures the built-in simulator, not a --target")
    try:
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise UsageError(f"--out-dir {out_dir}: {exc.strerror or exc}") from None
    for flag, path in (("--json", json_path), ("--plot", plot_path)):
        if path is not None:
            check_output_file(flag, path, inputs=list(archives))


def _finish(
    result: Search, json_path: Path | None, plot_path: Path | None, require: float | None
) -> None:
    """The table on stdout; the JSON and the chart where asked; exit 1 when the search
    stopped early or the capacity is under ``require``."""
    from tailreplay.report.capacity import plot, render, to_json

    for line in render(result):
        show(line)
    if json_path is not None:
        write_text(json_path, json.dumps(to_json(result), indent=1) + "\n")
    if plot_path is not None:
        write_text(plot_path, plot(result) + "\n")
    if result.stopped is not None:
        raise RunFailed(f"the search stopped: {result.stopped}")
    if require is not None and (result.capacity is None or result.capacity < require):
        lowest = min((t.factor for t in result.trials), default=0.0)
        got = f"below {lowest:g}x" if result.capacity is None else f"{result.capacity:.3g}x"
        raise RunFailed(f"the capacity ({got}) is under --require {require:g}x")


def _busiest(
    archives: list[Path], window_s: float, out_dir: Path, say: Callable[[str], None]
) -> tuple[Path, float]:
    """The archives' busiest ``window_s`` (by requests), copied to ``out_dir``; and the
    span of its requests (first to last start, s)."""
    from tailreplay.traces.archive.columns import load_columns
    from tailreplay.traces.archive.ops import copy_records, find_peak, record_filter
    from tailreplay.units import format_duration

    peak = find_peak(archives, round(window_s * 1e9))
    path = out_dir / "window.msgpack"
    path.unlink(missing_ok=True)
    copy_records(
        archives,
        path,
        source="capacity",
        keep=record_filter(start_ns=peak.start_ns, end_ns=peak.end_ns),
        stop=peak.stop,
    )
    say(f"window: the busiest {format_duration(window_s)}, {peak.requests:,} requests")
    starts = load_columns([path], [])["start_ns"]
    return path, max(float(starts.max() - starts.min()) / 1e9, 1e-3) if starts.size else 1e-3
