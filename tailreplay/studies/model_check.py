"""``traces validate-model``: does a workload model predict the tail the real traffic gets?

Three kinds of arm are replayed against the same target, each on a fresh
simulator (or the given target), one after another:

- ``exact``: the archive's window itself, as recorded (with ``windows`` > 1, that
  many consecutive windows, each its own arm, pooled into the reference: one
  window's P99 of a bursty process is one draw of it);
- ``model``: the model's synthesis with the window's length and mean rate (with
  several windows, a part each, at that window's rate, replayed as its window is);
- ``poisson``: the same requests as ``model`` (same seed, same shapes in the same
  order) at Poisson arrival times: the baseline a model has to beat.

Each arm's latency and TTFT percentiles come from its result archive through
``traces.metrics`` (the figures every view uses), with bootstrap intervals; the
relative error is against the exact arm (pooled, with several windows). An arm
whose replay was client-bound (dispatch lag P99 over the limit) measured the
client, not the target: its row says so and the check fails rather than
presenting its figures. So does an arm on a built-in simulator whose steps took
longer than its model (``SIM_SLOW_LIMIT``): the simulator's own CPU set its pace
(near saturation at a high ``speed``, its steps are that much shorter and a busy
machine's jitter weighs that much more), and replays of one window stop agreeing
with each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from yarl import URL

from tailreplay.errors import InputError, UsageError
from tailreplay.replayer.speed import Speed
from tailreplay.sim.profiles import profile
from tailreplay.studies.model_check_args import ValidateModelArgs
from tailreplay.studies.replay_args import ReplayArgs
from tailreplay.studies.target_setup import (
    SERVED_LOAD,
    fresh_targets,
    own_prompts,
    serving_factor,
    timed_sim_args,
)
from tailreplay.studies.trial import SIM_SLOW_LIMIT, longest_request, replay_child, sim_slowdown
from tailreplay.study_folder import claimed_folder
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.ops import Stop, copy_records, record_filter
from tailreplay.traces.results.client_health import client_verdict
from tailreplay.traces.results.figures import metric_values
from tailreplay.traces.results.stats import STATS_FIELDS, STATS_PRESENCE, requests
from tailreplay.traces.workload.burstiness import WINDOWS_S, index_of_dispersion
from tailreplay.traces.workload.clock import on_ticks
from tailreplay.traces.workload.fit import synthesize
from tailreplay.traces.workload.workload_model import Workload

__all__ = ["ArmResult", "CheckConfig", "pooled", "ranking_line", "run_check"]

Array = npt.NDArray[Any]
QUANTILES = (50.0, 95.0, 99.0)
_BOOTSTRAP = 400


_DEFAULT = ValidateModelArgs(archive=Path(), model_path=Path())
"""The command's defaults, which the config's are."""


@dataclass(frozen=True)
class CheckConfig:
    """What ``traces validate-model``'s options mean (``docs/fit.md``)."""

    archive: Path
    model: Workload
    out_dir: Path
    target: URL | None = None
    """Every arm's target; None: a fresh built-in simulator for each, its context sized
    to the longest request of any arm."""
    sim_profile: str = _DEFAULT.sim_profile
    sim_args: tuple[str, ...] = ()
    """Passed to each built-in simulator (``--NAME=VALUE``); step times given here are
    divided by ``speed`` too."""
    window_s: float | None = None
    offset_s: float = _DEFAULT.offset
    seeds: int = _DEFAULT.seeds
    speed: float = _DEFAULT.speed
    """Replay this much faster (the target's own clock must be as much faster: the
    built-in simulator's step times are divided by it)."""
    lag_limit_s: float = _DEFAULT.lag_limit
    """Dispatch lag P99 above this means an arm measured the client."""
    overwrite: bool = False
    """Replace a previous run's files in ``out_dir`` (``--overwrite``); else refused."""
    timeout_s: float = 600.0
    windows: int = _DEFAULT.windows
    """Consecutive held-out windows of ``window_s``, each replayed as recorded."""
    lengths: str = _DEFAULT.lengths
    """The lengths the synthetic arms draw (``Workload.lengths_for``): ``all`` or ``recent``."""
    scaling: str = _DEFAULT.scaling
    """How the model arm's MMPP reaches each window's rate (``arrivals.SCALINGS``)."""


ERROR_LIMIT = 0.01
"""An arm with more than this share of its requests failed is overloaded: not judged."""


@dataclass
class ArmResult:
    arm: str
    seed: int | None
    requests: int
    errors: int
    latency: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Percentile name -> (value, interval low, interval high), ms."""
    ttft: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    idc: list[float | None] = field(default_factory=list)
    lag_p99_ms: float | None = None
    client_bound: bool = False
    sim_slowdown: float | None = None
    """How much longer than modelled the built-in simulator's steps took (None: not one)."""
    cached_tokens: float | None = None
    """Mean prompt tokens a request that the target answered found in its prefix cache
    (its usage's cached tokens; None: no answer said): a synthetic arm that shares
    fewer prefixes than the traffic makes every prefill heavier than the real one."""
    results: list[str] = field(default_factory=list)
    """The names of its replays' result archives in the output folder (a synthetic arm
    has one a held-out window)."""

    @property
    def sim_bound(self) -> bool:
        return self.sim_slowdown is not None and self.sim_slowdown > SIM_SLOW_LIMIT

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None

    @property
    def overloaded(self) -> bool:
        """More failed than ``ERROR_LIMIT``: its latencies are of the requests the
        target had room for, not of the load the arm sent."""
        return self.error_rate is not None and self.error_rate > ERROR_LIMIT

    @property
    def unmeasured(self) -> bool:
        """Client- or simulator-bound, or overloaded: its figures are not the model's."""
        return self.client_bound or self.sim_bound or self.overloaded

    @property
    def why_unmeasured(self) -> str | None:
        """What made the arm no measure of the model (the first of them), or None."""
        if self.client_bound:
            return "client-bound"
        if self.sim_bound:
            return "simulator-bound"
        return "overloaded" if self.overloaded else None


def run_check(cfg: CheckConfig, say: Callable[[str], None]) -> list[ArmResult]:
    """Replay every arm and measure it; the exact arm first. ``out_dir`` is held for
    the run (``study_folder.py``)."""
    with claimed_folder(cfg.out_dir, overwrite=cfg.overwrite):
        return _run_check(cfg, say)


def _run_check(cfg: CheckConfig, say: Callable[[str], None]) -> list[ArmResult]:
    held = _windows(cfg)
    span_s, n = sum(w.span_s for w in held), sum(w.requests for w in held)
    say(
        f"window{'s' if len(held) > 1 else ''}: {n:,} requests over {span_s:,.0f} s "
        f"({n / span_s:.2f} req/s)"
    )
    if cfg.window_s is not None and held[-1].span_s < cfg.window_s * 0.999:
        say(
            f"warning: the archive ends {held[-1].span_s:,.0f} s into window {len(held)} "
            f"of {cfg.window_s:,.0f} s: that window is the {held[-1].span_s:,.0f} s recorded"
        )
    arms: list[tuple[str, int | None, list[Path]]] = [
        ("exact", None if len(held) == 1 else k, [w.path]) for k, w in enumerate(held, 1)
    ]
    for draw in range(1, cfg.seeds + 1):
        for kind in ("model", "poisson"):
            arms.append((kind, draw, _synthesized(cfg, held, kind, draw)))
    longest = longest_request([p for arm in arms for p in arm[2]])
    faster = _sized(cfg, [w.path for w in held], longest, say)
    fresh = fresh_targets(cfg.target, cfg.sim_profile, cfg.speed, cfg.sim_args, faster)
    results = []
    replayed = 0
    for kind, seed, paths in arms:
        say(f"replaying {_name(kind, seed)} ...")
        slowdowns = []
        for path in paths:
            # Each part on a fresh simulator, as each exact window is: a part starts
            # with an empty queue and a cold cache as its window did.
            with fresh(longest) as url:
                _replay(cfg, url, path, _results_path(path), arm=replayed)
                slowdowns.append(sim_slowdown(url))
            replayed += 1
        result = _measure(kind, seed, paths, cfg.lag_limit_s * 1e3)
        result.sim_slowdown = max((s for s in slowdowns if s is not None), default=None)
        results.append(result)
    return results + pooled(results, cfg.out_dir)


def _synthesized(cfg: CheckConfig, held: list[_Window], kind: str, draw: int) -> list[Path]:
    """A synthetic arm: one part for each held-out window, with as many requests as
    it at exactly its mean rate, starting where it starts. Each window's rate is an
    input to the model, not a prediction of it: pooled, the windows mix their loads,
    and an arm at their mean rate would queue less than that mix (the P99 is convex
    in load), whatever arrival process it drew. The model reaches that rate as
    ``cfg.scaling`` says (by default its own periods at that rate). Part k of seed S
    draws seed S + 10,000 (k - 1); the model's and Poisson's parts share their draws
    (the same requests, but where the model's arrival state draws other lengths)."""
    paths = []
    for k, window in enumerate(held):
        name = f"{kind}-{draw}" if len(held) == 1 else f"{kind}-{draw}-w{k + 1}"
        path = cfg.out_dir / f"{name}.msgpack"
        path.unlink(missing_ok=True)
        # At exactly the window's rate: a bursty process's count in a fixed span (and
        # the span of a count) varies a lot, and near the target's limit that noise
        # would outweigh what is compared.
        synthesize(
            cfg.model,
            path,
            count=window.requests,
            rate_rps=window.requests / window.span_s,
            seed=draw + 10_000 * k,
            start_ns=window.start_ns,
            arrivals=kind,
            exact_rate=True,
            lengths=cfg.lengths,
            scaling=cfg.scaling,
        )
        paths.append(path)
    return paths


def _results_path(arm: Path) -> Path:
    """Where the replay of the arm (or part of one) at ``arm`` writes its results."""
    return arm.with_name(f"{arm.stem}-results.msgpack")


PEAK_S = 30.0
"""The stretch whose rate a simulator is sized to serve (``_sized``)."""


def _sized(cfg: CheckConfig, exact: list[Path], longest: int, say: Callable[[str], None]) -> float:
    """How much faster than its profile the built-in simulator runs (1 with --target, or
    where --sim-arg sets a step time): enough that the held-out windows' busiest
    ``PEAK_S`` asks ``SERVED_LOAD`` of its capacity, so that the exact arm is served and
    every arm's P99 is one of served requests, not of the ones an overloaded target
    had room for."""
    if cfg.target is not None or timed_sim_args(cfg.sim_args):
        return 1.0
    cols = load_columns(exact, ["input_tokens", "output_tokens"])
    starts, _ = on_ticks(cols["start_ns"])
    seconds = (starts - starts.min()) / 1e9
    peak = float(np.bincount((seconds // PEAK_S).astype(np.int64)).max()) / PEAK_S
    span = float(seconds.max())
    if span < PEAK_S:  # a window shorter than the stretch: its own rate
        peak = starts.size / max(span, 1.0)
    p = profile(cfg.sim_profile)
    inputs, outputs = cols.where("input_tokens"), cols.where("output_tokens")
    lengths = (
        float(inputs.mean()) if inputs.size else 1.0,
        float(outputs.mean()) if outputs.size else p.output_mean,
    )
    faster = serving_factor(cfg.sim_profile, longest, peak * cfg.speed, lengths)
    if faster > 1.0:
        say(
            f"simulator: profile {cfg.sim_profile} with its steps {faster:.2f}x as fast, so that "
            f"the window's busiest {PEAK_S:g} s ({peak * cfg.speed:.1f} req/s at this speed) "
            f"asks {SERVED_LOAD:.0%} of its capacity (--sim-arg step times to size it yourself)"
        )
    return faster


def pooled(results: list[ArmResult], out_dir: Path) -> list[ArmResult]:
    """Per synthetic kind with several seeds, the seeds' requests as one arm (``model
    pooled``): a model predicts a distribution of latencies, and one window's P99 of a
    bursty process varies a lot from draw to draw (the true process itself can miss a
    given window's P99 by half), so the pooled P99 is the model's prediction and the
    seeds' spread is the draw-to-draw noise."""
    out = []
    for kind in ("exact", "model", "poisson"):
        arms = [r for r in results if r.arm == kind and r.seed is not None]
        if len(arms) < 2:
            continue
        files = [out_dir / name for r in arms for name in r.results]
        values = metric_values(
            requests(load_columns(files, list(STATS_FIELDS), presence_only=STATS_PRESENCE))
        )
        out.append(
            ArmResult(
                arm=f"{kind} pooled",
                seed=None,
                requests=sum(r.requests for r in arms),
                errors=sum(r.errors for r in arms),
                latency=_with_intervals(values["latency"]),
                ttft=_with_intervals(values["ttft"]),
                idc=[None] * len(WINDOWS_S),
                lag_p99_ms=max((r.lag_p99_ms or 0.0) for r in arms),
                client_bound=any(r.client_bound for r in arms),
                sim_slowdown=max(
                    (r.sim_slowdown for r in arms if r.sim_slowdown is not None), default=None
                ),
                cached_tokens=_cached_tokens(files),
            )
        )
    return out


@dataclass(frozen=True)
class _Window:
    """A held-out window, copied to an archive of its own."""

    path: Path
    start_ns: int
    span_s: float
    requests: int


def _windows(cfg: CheckConfig) -> list[_Window]:
    """The held-out windows, each copied to its own archive."""
    starts = load_columns([cfg.archive], [])["start_ns"]
    if starts.size < 10:
        raise InputError(f"{cfg.archive}: {starts.size} records are too few to check a model")
    if cfg.windows > 1 and cfg.window_s is None:
        raise UsageError("--windows needs --window: the length of each")
    held = []
    for k in range(cfg.windows):
        lo = int(starts[0] + (cfg.offset_s + k * (cfg.window_s or 0.0)) * 1e9)
        hi = int(lo + cfg.window_s * 1e9) if cfg.window_s is not None else int(starts[-1]) + 1
        if lo > starts[-1]:
            raise InputError(
                f"{cfg.archive}: window {k + 1} of {cfg.windows} starts after the "
                "last record (fewer --windows, or a shorter --window)"
            )
        # A window past the archive's end holds traffic only up to the last record: the
        # synthetic arms' rate is over that span, not over the empty rest.
        span_s = (min(hi, int(starts[-1]) + 1) - lo) / 1e9
        exact = cfg.out_dir / ("exact.msgpack" if cfg.windows == 1 else f"exact-{k + 1}.msgpack")
        exact.unlink(missing_ok=True)
        keep = record_filter(start_ns=lo, end_ns=hi)
        stop = Stop(hi, int(np.searchsorted(starts, hi, side="left")))
        done = copy_records([cfg.archive], exact, source="validate-model", keep=keep, stop=stop)
        if done.written < 10:
            raise InputError(f"window {k + 1} holds {done.written} records; at least 10 are needed")
        held.append(_Window(exact, lo, span_s, done.written))
    return held


def _replay(cfg: CheckConfig, url: str, archive: Path, out: Path, *, arm: int) -> None:
    """One arm, as recorded (no tail stretch), at ``cfg.speed``; against a given target,
    on prompts of its own (``own_prompts``)."""
    args = ReplayArgs(
        archives=(archive,),
        target=URL(url),
        out=out,
        speed=Speed(cfg.speed, cfg.speed),
        tail_stretch=1.0,
        lag_limit=cfg.lag_limit_s,
        timeout=cfg.timeout_s,
        fail_fast=0,
    )
    replay_child(own_prompts(args, cfg.target, arm))


def _measure(kind: str, seed: int | None, arms: list[Path], limit_ms: float) -> ArmResult:
    """One arm's figures, over the replays of its parts (``arms``, in time order)."""
    outs = [_results_path(p) for p in arms]
    cols = load_columns(outs, list(STATS_FIELDS), presence_only=STATS_PRESENCE)
    r = requests(cols)
    values = metric_values(r)
    lags = cols["lag_ns"][cols.present["lag_ns"]]
    verdict = client_verdict(lags, limit_ms)
    # On a quantised clock, each request at its tick's grid point: a jittered
    # stamp would put a tick's requests into the window before.
    starts, _ = on_ticks(load_columns(arms, [])["start_ns"])
    sched = np.sort(starts.astype(np.float64) / 1e9)
    return ArmResult(
        arm=kind,
        seed=seed,
        requests=r.n,
        errors=int(r.error.sum()),
        latency=_with_intervals(values["latency"]),
        ttft=_with_intervals(values["ttft"]),
        idc=[index_of_dispersion(sched, w) for w in WINDOWS_S],
        lag_p99_ms=verdict["lag_p99_ms"],
        client_bound=verdict["client_bound"],
        cached_tokens=_cached_tokens(outs),
        results=[p.name for p in outs],
    )


def _cached_tokens(results: list[Path]) -> float | None:
    """Mean cached prompt tokens over the answers in ``results`` that report them."""
    cols = load_columns(results, ["cached_tokens"])
    cached = cols.where("cached_tokens")
    return float(cached.mean()) if cached.size else None


def _with_intervals(values: Array) -> dict[str, tuple[float, float, float]]:
    """P50/P95/P99 with a 95% bootstrap interval each (seeded: the same run, the same
    intervals)."""
    if values.size == 0:
        return {}
    rng = np.random.default_rng(0)
    points = np.percentile(values, QUANTILES)
    draws = np.empty((_BOOTSTRAP, len(QUANTILES)))
    for i in range(_BOOTSTRAP):
        draws[i] = np.percentile(values[rng.integers(0, values.size, values.size)], QUANTILES)
    lo, hi = np.percentile(draws, [2.5, 97.5], axis=0)
    return {
        f"p{q:g}": (float(p), float(a), float(b))
        for q, p, a, b in zip(QUANTILES, points, lo, hi, strict=True)
    }


def to_json(results: list[ArmResult]) -> str:
    arms = [
        {
            **r.__dict__,
            "sim_bound": r.sim_bound,
            "error_rate": r.error_rate,
            "overloaded": r.overloaded,
        }
        for r in results
    ]
    return json.dumps({"arms": arms, "errors": errors(results)}, indent=1)


def errors(results: list[ArmResult]) -> dict[str, dict[str, list[float]]]:
    """Per synthetic arm kind and figure (``latency_p99``, ``ttft_p99``): each seed's
    relative error against the exact arm (the windows pooled, when there are several);
    arms that were client- or simulator-bound (or an exact arm that was) are left out."""
    exact = next((r for r in results if r.arm == "exact pooled"), None) or next(
        r for r in results if r.arm == "exact"
    )
    out: dict[str, dict[str, list[float]]] = {}
    for r in results:
        if r.arm.startswith("exact"):
            continue
        kind = out.setdefault(r.arm, {"latency_p99": [], "ttft_p99": []})
        if r.unmeasured or exact.unmeasured:
            continue  # it measured the replayer or the simulator's CPU, not the model
        for figure, mine, theirs in (
            ("latency_p99", r.latency, exact.latency),
            ("ttft_p99", r.ttft, exact.ttft),
        ):
            if "p99" in mine and "p99" in theirs and theirs["p99"][0] > 0:
                kind[figure].append(mine["p99"][0] / theirs["p99"][0] - 1)
    return out


def render(results: list[ArmResult]) -> list[str]:
    """The table ``validate-model`` prints, then one line per synthetic kind."""
    head = (
        f"{'arm':<16}{'requests':>9}{'errors':>7}{'rate':>7}  {'latency P50/P95/P99 ms':<24}"
        f"{'P99 95% interval':<18}{'TTFT P50/P95/P99 ms':<22}{'TTFT P99 interval':<18}"
        f"{'IDC 3s/30s/60s':<18}{'lag P99':>8}{'cached':>8}"
    )
    lines = [head]
    for r in results:
        name = _name(r.arm, r.seed)
        lag = "-" if r.lag_p99_ms is None else f"{r.lag_p99_ms:.1f}ms"
        rate = "-" if r.error_rate is None else f"{r.error_rate:.1%}"
        row = f"{name:<16}{r.requests:>9,}{r.errors:>7,}{rate:>7}  "
        if r.client_bound:
            lines.append(row + f"CLIENT-BOUND: dispatch lag P99 {lag}; not a measure of the target")
            continue
        if r.sim_bound:
            lines.append(
                row + f"SIMULATOR-BOUND: its steps took {r.sim_slowdown:.0%} longer than "
                "modelled; not a measure of the model"
            )
            continue
        if r.overloaded and r.error_rate is not None:
            lines.append(
                row + f"OVERLOADED: {r.error_rate:.1%} of its requests failed (over "
                f"{ERROR_LIMIT:.0%}); not a measure of the model"
            )
            continue
        idc = "/".join("-" if x is None else f"{x:.1f}" for x in r.idc)
        cached = "-" if r.cached_tokens is None else f"{r.cached_tokens:,.0f}"
        lines.append(
            row + f"{_three(r.latency):<24}{_interval(r.latency):<18}"
            f"{_three(r.ttft):<22}{_interval(r.ttft):<18}{idc:<18}{lag:>8}{cached:>8}"
        )
    for kind, figures in errors(results).items():
        parts = []
        for figure, errs in figures.items():
            if errs:
                mean = float(np.mean(np.abs(errs)))
                each = ", ".join(f"{e:+.1%}" for e in errs)
                parts.append(f"{figure.replace('_', ' ')} error mean |{mean:.1%}| ({each})")
        lines.append(f"{kind}: " + ("; ".join(parts) if parts else "nothing to compare"))
    ranking = ranking_line(results)
    if ranking is not None:
        lines.append(ranking)
    return lines


def ranking_line(results: list[ArmResult]) -> str | None:
    """Whether the held-out windows can tell the model from Poisson on latency P99: the
    two arms' mean |error| must differ by more than the windows' own uncertainty (the
    exact P99's bootstrap half-width, relative, and with several windows the spread of
    their P99s). None when an arm has nothing to compare."""
    errs = errors(results)
    model = next((v["latency_p99"] for k, v in errs.items() if k.startswith("model")), [])
    poisson = next((v["latency_p99"] for k, v in errs.items() if k.startswith("poisson")), [])
    windows = [r for r in results if r.arm == "exact" and "p99" in r.latency]
    if not model or not poisson or not windows:
        return None
    noise = max(_half_width(r) for r in windows)
    p99s = [r.latency["p99"][0] for r in windows]
    if len(p99s) > 1:
        noise = max(noise, float(np.std(p99s) / np.mean(p99s)))
    m, p = float(np.mean(np.abs(model))), float(np.mean(np.abs(poisson)))
    which = "one window" if len(windows) == 1 else f"these {len(windows)} windows"
    if abs(m - p) <= noise:
        more = "" if len(windows) > 1 else "; replay more of them (--windows 4)"
        return (
            f"{which} cannot rank the models: their latency P99 errors (|{m:.0%}| and "
            f"|{p:.0%}| for the model and Poisson) differ by less than the held-out "
            f"P99's own uncertainty (±{noise:.0%}){more}"
        )
    closer = "the model" if m < p else "Poisson"
    return f"ranked on {which}: {closer} is closer on latency P99 (|{m:.0%}| against |{p:.0%}|)"


def _half_width(r: ArmResult) -> float:
    value, low, high = r.latency["p99"]
    return (high - low) / 2 / value if value > 0 else 0.0


def _name(kind: str, seed: int | None) -> str:
    if seed is None:
        return kind
    return f"exact window {seed}" if kind == "exact" else f"{kind} seed {seed}"


def _three(q: dict[str, tuple[float, float, float]]) -> str:
    return "/".join(f"{q[k][0]:.0f}" for k in ("p50", "p95", "p99")) if q else "-"


def _interval(q: dict[str, tuple[float, float, float]]) -> str:
    return f"{q['p99'][1]:.0f}..{q['p99'][2]:.0f}" if q else "-"
