"""``tailreplay capacity``'s options, typed and declared once: each field carries its
flags, how its text is read, its default, range and help (``tailreplay/declared.py``).
The command line generates its click options from these fields and builds the
``CapacityStudy`` (``studies/capacity.py``) from them; the study defaults to the same
declarations. Options replay shares (the target, ``--tail-stretch``, ``--lag-limit``,
``--scrape``, the simulator's) are its declarations with capacity's help."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from yarl import URL

from tailreplay import shared_options as shared
from tailreplay.declared import Choice, PathKind, Setting, declared
from tailreplay.option_values import DURATION, FACTOR, FILE_OUT
from tailreplay.replayer.scrape import ScrapeTarget
from tailreplay.replayer.settings import SCRAPE
from tailreplay.report.slo import SLO, Objective
from tailreplay.sim.profiles import SIM_ARG, SIM_PROFILE
from tailreplay.study_folder import OVERWRITE
from tailreplay.traces.archive.folders import ARCHIVES
from tailreplay.traces.results.client_health import LAG_LIMIT

__all__ = ["CapacityArgs", "LoadBy"]

LoadBy = Literal["speed", "amplify"]
"""How a trial raises the load: the window replayed faster, or each request sent as
many times (``replay --speed`` or ``--amplify``)."""


@dataclass(frozen=True, kw_only=True)
class CapacityArgs:
    """``capacity``'s options, parsed: one field per option, named as click names it,
    declared in the order ``--help`` lists them."""

    archives: tuple[Path, ...] = declared(ARCHIVES)
    target: URL | None = declared(
        replace(
            shared.TARGET, help="Base URL (default: a fresh built-in simulator for each trial)."
        )
    )
    slos: list[Objective] = declared(
        replace(
            SLO,
            help="Objectives, as report's: e.g. 'latency:p99<=2000ms,error_rate<=1%'.",
            required=True,
        )
    )
    by: LoadBy = declared(
        Setting(
            "--by",
            "speed",
            "Raise the load by replaying faster, or by sending copies.",
            kind=Choice(("speed", "amplify")),
            show_default=True,
        )
    )
    window: float = declared(
        Setting(
            "--window",
            "5m",
            "Replay the archive's busiest window this long.",
            kind=DURATION,
            show_default=True,
        )
    )
    max_factor: float = declared(
        Setting("--max", "16x", "The highest factor tried.", kind=FACTOR, show_default=True)
    )
    min_factor: float = declared(
        Setting(
            "--min",
            "0.25x",
            "The lowest factor the search tries: a target that does not pass there is "
            "reported below it (a full trial there lasts the window's span over the factor; "
            "--sweep starts at 1x).",
            kind=FACTOR,
            show_default=True,
        )
    )
    precision: float = declared(
        Setting(
            "--precision",
            "5%",
            "Stop when the first failure is within this of the last pass.",
            kind=FACTOR,
            show_default=True,
        )
    )
    require: float | None = declared(
        Setting("--require", None, "Exit 1 unless the capacity is at least this.", kind=FACTOR)
    )
    budget: float | None = declared(
        Setting(
            "--budget",
            None,
            "Wall time after which no trial starts (e.g. 30m): the last pass is then a "
            "lower bound, said in a warning.",
            kind=DURATION,
        )
    )
    repeats: int = declared(
        Setting(
            "--repeats",
            1,
            "Replays of an uncertain trial before it counts as not passing.",
            kind=int,
            low=0,
            high=5,
            show_default=True,
        )
    )
    drain: float = declared(
        Setting(
            "--drain",
            "10s",
            "Wait between trials against a --target.",
            kind=DURATION,
            show_default=True,
        )
    )
    tail_stretch: float = declared(shared.TAIL_STRETCH)
    lag_limit: float = declared(
        replace(LAG_LIMIT, help="Dispatch lag P99 above this means the client was the bottleneck.")
    )
    sim_profile: str = declared(
        replace(
            SIM_PROFILE,
            help="Profile of the built-in simulator, as replay's (fast: an H100-class deployment).",
        )
    )
    sim_args: tuple[str, ...] = declared(
        replace(
            SIM_ARG, help="Passed to the built-in simulator (repeatable).", metavar="--NAME=VALUE"
        )
    )
    twin: Path | None = declared(
        Setting(
            "--twin",
            None,
            "A profile calibrated from a replay against the real target (`tailreplay sim "
            "calibrate`): every trial runs against the built-in simulator with it instead "
            "of the target, and the answer says what the twin was calibrated on.",
            kind=PathKind(exists=True, dir_okay=False, read=True),
            metavar="PROFILE",
        )
    )
    out_dir: Path = declared(
        Setting(
            "--out-dir",
            "capacity",
            "Where the window and every trial's results go (one run at a time).",
            kind=PathKind(file_okay=False),
            show_default=True,
        )
    )
    overwrite: bool = declared(OVERWRITE)
    json_path: Path | None = declared(
        Setting(
            "--json",
            None,
            "Write the capacity, its interval and every trial as JSON here.",
            kind=FILE_OUT,
        )
    )
    plot_path: Path | None = declared(
        Setting("--plot", None, "Write P99 against the factor as an SVG chart here.", kind=FILE_OUT)
    )
    sweep: float | None = declared(
        Setting(
            "--sweep",
            None,
            "Instead of searching, replay the whole window at 1x, 1x + this, 1x + twice "
            "this, ... until one fails: the brute-force baseline (e.g. 0.5x).",
            kind=FACTOR,
        )
    )
    scrapes: tuple[ScrapeTarget, ...] = declared(SCRAPE)
