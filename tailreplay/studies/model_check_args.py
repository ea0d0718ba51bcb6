"""``tailreplay traces validate-model``'s options, typed and declared once: each field
carries its flags, how its text is read, its default, range and help
(``tailreplay/declared.py``). The command line generates its click options from these
fields and builds the ``CheckConfig`` (``studies/model_check.py``), which defaults to
the same declarations.

Its ``--speed`` is a time scale (the arms replayed faster, the simulator's steps
shorter by as much), not replay's load shape: a declaration of its own. The target,
``--lag-limit`` and the simulator's options are replay's declarations with this
command's help and defaults."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from yarl import URL

from tailreplay import shared_options as shared
from tailreplay.declared import Choice, PathKind, Setting, declared
from tailreplay.option_values import DURATION, FACTOR, FILE_OUT
from tailreplay.sim.profiles import SIM_ARG, SIM_PROFILE
from tailreplay.study_folder import OVERWRITE
from tailreplay.traces.results.client_health import LAG_LIMIT
from tailreplay.traces.workload.scaling import PERIODS, SCALINGS

__all__ = ["ValidateModelArgs"]

_FILE = PathKind(dir_okay=False, read=True)


@dataclass(frozen=True, kw_only=True)
class ValidateModelArgs:
    """``traces validate-model``'s options, parsed: one field per option, named as
    click names it, declared in the order ``--help`` lists them."""

    archive: Path = declared(Setting("archive", None, kind=_FILE, argument=True, required=True))
    model_path: Path = declared(
        Setting("--model", None, "What `traces fit` wrote.", kind=_FILE, required=True)
    )
    target: URL | None = declared(
        replace(
            shared.TARGET,
            help="Base URL to replay at (default: a fresh built-in simulator for each arm, "
            "its context sized to the longest request).",
        )
    )
    window: float | None = declared(
        Setting(
            "--window",
            None,
            "Length of the archive window replayed (default: all of it), e.g. 30m.",
            kind=DURATION,
        )
    )
    offset: float = declared(
        Setting(
            "--offset",
            "0s",
            "Where the window starts, from the first record.",
            kind=DURATION,
            show_default=True,
        )
    )
    windows: int = declared(
        Setting(
            "--windows",
            1,
            "Consecutive held-out windows of --window, each replayed as recorded; the arms "
            "are compared with them pooled (one window's P99 of a bursty process is one "
            "draw).",
            kind=int,
            low=1,
            high=20,
            show_default=True,
        )
    )
    seeds: int = declared(
        Setting(
            "--seeds",
            3,
            "Syntheses of the model (and Poisson baselines) to replay.",
            kind=int,
            low=1,
            high=20,
            show_default=True,
        )
    )
    lengths: str = declared(
        Setting(
            "--lengths",
            "all",
            "The request lengths the synthetic arms draw: all of the fitted span's, or its "
            "recent half's (for a mix that drifted: `traces fit` says whether it did).",
            kind=Choice(("all", "recent")),
            show_default=True,
        )
    )
    scaling: str = declared(
        Setting(
            "--scaling",
            PERIODS,
            "How the model's synthesis reaches each window's rate (as `synth --scaling`): "
            "periods: the fitted span's own periods at that rate; users: as many more "
            "independent users, as bursty.",
            kind=Choice(SCALINGS),
            show_default=True,
        )
    )
    speed: float = declared(
        Setting(
            "--speed",
            "1x",
            "Replay this much faster, the simulator's step times shorter by as much: the "
            "same queues in less time (built-in simulator only).",
            kind=FACTOR,
            show_default=True,
        )
    )
    sim_profile: str = declared(
        replace(
            SIM_PROFILE,
            help="Profile of the built-in simulator, its steps made faster where the held-out "
            "window would overload it (the run says by how much).",
        )
    )
    out_dir: Path = declared(
        Setting(
            "--out-dir",
            "validate-model",
            "Where the arms' archives and results go (one run at a time).",
            kind=PathKind(file_okay=False),
            show_default=True,
        )
    )
    overwrite: bool = declared(OVERWRITE)
    json_path: Path | None = declared(
        Setting("--json", None, "Write every arm's figures as JSON here.", kind=FILE_OUT)
    )
    lag_limit: float = declared(
        replace(
            LAG_LIMIT,
            default="25ms",
            help="Dispatch lag P99 above this means an arm measured the client. Looser than "
            f"replay's {LAG_LIMIT.default}: the P99 latencies compared here are seconds, and "
            "25 ms of lag moves them by 1% or less.",
        )
    )
    sim_args: tuple[str, ...] = declared(
        replace(
            SIM_ARG,
            help="Passed to the built-in simulator (repeatable), e.g. "
            "--sim-arg=--max-num-seqs=64; step times given here are divided by --speed too.",
            metavar="--NAME=VALUE",
        )
    )
