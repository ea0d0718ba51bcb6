"""``capacity`` as a study: what the command's options mean (``CapacityStudy``) and the
run that answers it (``run_capacity``): the archives' busiest window, then a search
(``capacity_search``) whose every trial is a child ``replay`` of that window against a
fresh target, judged on the objectives (``capacity_judge``).

The command line parses and checks the options, calls ``run_capacity`` and prints the
``Search`` it returns; the Python API calls it the same way.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from yarl import URL

from tailreplay.errors import EXIT_NOT_MEASURED, InputError, UsageError
from tailreplay.replayer.scrape import ScrapeTarget
from tailreplay.replayer.speed import Speed
from tailreplay.report.capacity_result import Search, Trial, TwinSource
from tailreplay.report.side import load_side
from tailreplay.report.slo import Objective, check_judgeable
from tailreplay.shared_options import TAIL_STRETCH
from tailreplay.sim.profiles import departures, overrides_in, profile, profile_file
from tailreplay.studies import capacity_judge
from tailreplay.studies.capacity_args import CapacityArgs, LoadBy
from tailreplay.studies.capacity_search import COARSE_SHARE, search, sweep
from tailreplay.studies.replay_args import ReplayArgs
from tailreplay.studies.target_setup import fresh_targets, own_prompts
from tailreplay.studies.trial import longest_request, replay_child
from tailreplay.studies.watched_objectives import watchable
from tailreplay.study_folder import check_folder, claimed_folder
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.ops import copy_records, find_peak, record_filter
from tailreplay.units import format_duration

__all__ = [
    "CapacityStudy",
    "LoadBy",
    "busiest_window",
    "check_study",
    "run_capacity",
    "trial_args",
]

_DEFAULT = CapacityArgs(slos=[])
"""The command's defaults, which the study's are."""


@dataclass(frozen=True)
class CapacityStudy:
    """What ``tailreplay capacity``'s options mean (``docs/capacity.md``)."""

    archives: tuple[Path, ...]
    objectives: tuple[Objective, ...]
    """Every trial is judged on these (``--slo``)."""
    target: URL | None = None
    """Every trial's target; None: a fresh built-in simulator for each."""
    sim_profile: str = _DEFAULT.sim_profile
    sim_args: tuple[str, ...] = ()
    """Passed to each built-in simulator (``--NAME=VALUE``)."""
    twin: Path | None = None
    """A calibrated profile (``sim calibrate``): each trial's built-in simulator runs it,
    in place of the target (``--twin``)."""
    by: LoadBy = _DEFAULT.by
    window_s: float = _DEFAULT.window
    """The archives' busiest span this long is what every trial replays."""
    min_factor: float = _DEFAULT.min_factor
    max_factor: float = _DEFAULT.max_factor
    precision: float = _DEFAULT.precision
    repeats: int = _DEFAULT.repeats
    """Replays of an uncertain trial before it counts as not passing."""
    drain_s: float = _DEFAULT.drain
    """The wait between trials against a given ``target``."""
    tail_stretch: float = _DEFAULT.tail_stretch
    lag_limit_s: float = _DEFAULT.lag_limit
    scrapes: tuple[ScrapeTarget, ...] = ()
    sweep_step: float | None = None
    """A sweep (1x, 1x + step, ... until one fails) instead of the search."""
    out_dir: Path = _DEFAULT.out_dir
    """Where the window and every trial's results go."""
    budget_s: float | None = None
    """Wall time after which no trial starts (``--budget``); None: no limit."""
    overwrite: bool = False
    """Replace a previous run's files in ``out_dir`` (``--overwrite``); else refused."""


def run_capacity(study: CapacityStudy, say: Callable[[str], None]) -> Search:
    """The largest factor of the archives' busiest window that ``study``'s target serves
    within its objectives, with every trial; ``say`` gets the progress lines, e.g.
    ``run_capacity(CapacityStudy((path,), (*parse_objectives(["latency:p99<=2s"]),)), print)``.
    """
    check_study(study)  # before the folder is made: a study that cannot run leaves none
    with claimed_folder(study.out_dir, overwrite=study.overwrite):
        return _search(study, say)


def _search(study: CapacityStudy, say: Callable[[str], None]) -> Search:
    window, span_s = busiest_window(list(study.archives), study.window_s, study.out_dir, say)
    trials = _Trials(study, window, span_s)
    twin = None
    if study.twin is not None:
        cols = load_columns([window], ["model"])
        models = [str(m) for m in cols.where("model")]  # those that name one
        window_rps = cols.n / span_s if span_s > 0 else 0.0
        twin = replace(
            twin_of(study.twin),
            window_rps=window_rps,
            departures=tuple(twin_departures(study.twin, study.sim_args, models)),
        )
        for line in twin.describe():
            say(line)
    result = _run_search(study, trials, say)
    result.twin = twin
    return result


def _run_search(study: CapacityStudy, trials: _Trials, say: Callable[[str], None]) -> Search:
    if study.sweep_step is not None:
        return sweep(
            trials.run,
            trials.judge,
            step=study.sweep_step,
            max_factor=study.max_factor,
            repeats=study.repeats,
            say=say,
            budget_s=study.budget_s,
        )
    return search(
        trials.run,
        trials.judge,
        max_factor=study.max_factor,
        min_factor=study.min_factor,
        precision=study.precision,
        repeats=study.repeats,
        say=say,
        budget_s=study.budget_s,
    )


def twin_of(path: Path) -> TwinSource:
    """What ``--twin`` names: a profile ``tailreplay sim`` runs (checked as it checks
    one) that carries its calibration (``sim calibrate`` writes it); ``InputError``
    (exit 3), naming the file, for one that does not."""
    calibration = profile_file(path)[1].get("calibration")
    if not isinstance(calibration, dict) or not isinstance(calibration.get("files"), list):
        raise InputError(
            f"{path}: a profile, but no calibration in it: --twin takes what `tailreplay sim "
            "calibrate` writes"
        )
    if not all(isinstance(f, str) for f in calibration["files"]):
        raise InputError(f"{path}: calibration.files must be the names of the results fitted")
    for name, most in (("requests", MOST_REQUESTS), ("rate_rps", MOST_RPS)):
        value = calibration.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > most:
            raise InputError(f"{path}: calibration.{name} must be at most {most:,}, not {value}")
    residuals = calibration.get("residuals")
    residuals = residuals if isinstance(residuals, dict) else {}
    return TwinSource(
        profile=str(path),
        files=tuple(str(f) for f in calibration["files"]),
        requests=_number(calibration.get("requests"), int),
        rate_rps=_number(calibration.get("rate_rps"), float),
        mean_concurrency=_number(calibration.get("mean_concurrency"), float),
        ttft_residual=_residual(residuals.get("ttft_median")),
        latency_residual=_residual(residuals.get("latency_median")),
    )


def twin_departures(twin: Path, sim_args: tuple[str, ...], models: Sequence[str]) -> list[str]:
    """Where a search would run ``twin`` outside its calibration: the fitted fields its
    ``--sim-arg``s change (``sim.profiles.departures``), and a window whose requests name
    a model other than the one it was calibrated on."""
    lines = departures(twin, overrides_in(sim_args))
    fitted_model = profile_file(twin)[0].served_model
    named = Counter(m for m in models if m)
    if named and fitted_model not in named:
        model, count = named.most_common(1)[0]
        lines.append(
            f"the window's requests name {model!r} ({count:,} of {sum(named.values()):,} "
            f"that name one); the twin "
            f"was calibrated on {fitted_model!r}, whose costs it has"
        )
    return lines


MOST_REQUESTS = 10**12
MOST_RPS = 10**7
"""What a calibration's account of itself may say: no replay sends more."""


def _number(value: object, kind: type[int] | type[float]) -> Any:
    """A count or rate from the file, 0 where it is not a finite number >= 0."""
    found = _residual(value)
    return kind(found) if found is not None else kind(0)


def _residual(value: object) -> float | None:
    """A finite number >= 0 from the file, else None (a bool is no number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def check_study(study: CapacityStudy) -> None:
    """Refuse a study that cannot run (``UsageError``, exit 2) before any replay, and
    make its ``out_dir``: factors out of range, simulator flags with a target, an
    objective relative to a recording that does not have its figure, an ``out_dir``
    holding a previous run's files without ``overwrite``. ``run_capacity`` calls it;
    calling it again is harmless."""
    if study.max_factor <= 1:
        raise UsageError("--max must be above 1x")
    if not 0 < study.min_factor < 1:
        raise UsageError("--min must be above 0 and under 1x")
    TAIL_STRETCH.refuse_outside(study.tail_stretch)
    if study.target is not None and study.sim_args:
        raise UsageError("--sim-arg configures the built-in simulator, not a --target")
    if study.twin is not None and study.target is not None:
        raise UsageError("--twin stands in for the target: give --twin or --target, not both")
    if study.twin is not None and any(a.split("=")[0] == "--profile" for a in study.sim_args):
        # The simulator takes the last --profile: the trials would run that one, and the
        # answer still name the twin.
        raise UsageError("--twin is the simulator's profile: give --twin or --sim-arg=--profile")
    if study.twin is not None:
        twin_of(study.twin)  # a file that is no calibrated profile: one line, exit 3
    if study.target is None and study.sim_args:
        # A value no profile holds (--max-num-seqs=0: no request is ever served) is
        # refused now, not met as a trial that never ends.
        base = str(study.twin) if study.twin is not None else study.sim_profile
        try:
            profile(base).with_overrides(**overrides_in(study.sim_args))
        except ValueError as exc:
            raise UsageError(f"--sim-arg: {exc}") from None
    check_judgeable(list(study.objectives), list(study.archives))
    check_folder(study.out_dir, overwrite=study.overwrite)


class _Trials:
    """The search's ``run`` and ``judge``: a trial is a child ``replay`` of the window
    against a fresh target (``trial_args``), judged on the study's objectives."""

    def __init__(self, study: CapacityStudy, window: Path, span_s: float) -> None:
        self.study, self.window, self.span_s = study, window, span_s
        self.fresh = fresh_targets(study.target, study.sim_profile, 1.0, study.sim_args)
        self.longest = longest_request([window])
        relative = any(o.relative for o in study.objectives)
        self.recorded = load_side([window]) if relative else None
        self.replays = 0

    def run(self, factor: float, attempt: int, coarse: bool) -> Path:
        kind = "coarse" if coarse else "trial"
        out = self.study.out_dir / f"{kind}-{factor:g}x-{attempt + 1}.msgpack"
        # A coarse trial replays a quarter of the window's span in replay time (--duration),
        # at any factor: sped up, that is more of the window (all of it from 4x), so
        # the load lasts as long as at 1x and a queue has as long to build.
        duration_s = COARSE_SHARE * self.span_s if coarse else None
        if self.study.target is not None and self.replays:
            time.sleep(self.study.drain_s)  # let the target finish what the last trial left queued
        args = trial_args(self.study, self.window, factor, duration_s=duration_s)
        args = own_prompts(args, self.study.target, self.replays)
        self.replays += 1
        ok = (0, 1, EXIT_NOT_MEASURED)
        if self.study.twin is not None:
            # The twin is served offline, on a virtual clock: the same engine model as a
            # `tailreplay sim --profile` would run, in seconds instead of the window's time.
            # No watch: an offline trial serves its whole window in seconds anyway.
            twin = (f"--profile={self.study.twin}", *self.study.sim_args)
            offline = replace(args, offline=True, sim_args=twin, slos=[], slo_stop=None)
            replay_child(replace(offline, out=out), ok=ok)
            return out
        with self.fresh(self.longest) as url:
            replay_child(replace(args, target=URL(url), out=out), ok=ok)
        return out

    def judge(self, factor: float, runs: list[Path]) -> Trial:
        return capacity_judge.judge(factor, runs, self.study.objectives, self.recorded)


def trial_args(
    study: CapacityStudy, window: Path, factor: float, *, duration_s: float | None = None
) -> ReplayArgs:
    """The child ``replay`` of one trial but for its target and results: the window at
    ``factor`` (faster, or as many copies), the study's tail stretch, lag limit and
    scrapes, for ``duration_s`` of replay time (a coarse trial); running to the end
    whatever fails (``fail_fast=0``, ``judge`` reads the results); and in a search, the
    watch that stops waiting for answers once an objective is missed."""
    # Six significant digits, as the child's flags carry the factor (the search's own
    # are rounder: ``units.round_factor``).
    load = float(f"{factor:.6g}")
    args = ReplayArgs(
        archives=(window,),
        tail_stretch=study.tail_stretch,
        lag_limit=study.lag_limit_s,
        scrapes=study.scrapes,
        fail_fast=0,
        duration=None if duration_s is None else float(f"{duration_s:.6g}"),
    )
    if study.by == "speed":
        args = replace(args, speed=Speed(load, load))
    else:
        args = replace(args, amplify=load)
    return args if study.sweep_step is not None else _watch(args, study.objectives)


def _watch(args: ReplayArgs, objectives: tuple[Objective, ...]) -> ReplayArgs:
    """A search's trial stops waiting for answers once an objective is missed whatever
    they are (a trial far past the limit would wait out its queue); the sweep, the
    brute-force baseline, replays each factor whole. The trial's own report is skipped:
    ``judge`` reads its results."""
    watched = [o for o in objectives if watchable(o)]
    if not watched:
        return args
    return replace(args, slos=watched, slo_stop="after-sending", slo_report=False)


def busiest_window(
    archives: list[Path], window_s: float, out_dir: Path, say: Callable[[str], None]
) -> tuple[Path, float]:
    """The archives' busiest ``window_s`` (by requests), copied to ``out_dir``; and the
    span of its requests (first to last start, s)."""
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
