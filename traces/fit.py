"""Workload models: fitted to an archive, then synthesised at any rate and length.

A model is a renewal arrival process plus independent request shapes:

- inter-arrival times: Weibull and Gamma are both fitted by maximum likelihood;
  the one with the higher log-likelihood is kept (shape < 1 means burstier than
  Poisson, > 1 more regular). Synthesis keeps the shape and rescales for a new
  rate, so "the same traffic, twice as busy" keeps its burstiness;
- input and output tokens: Gamma each (independent of each other and of time);
- shares of streamed requests, models and paths;
- optionally (``profile_bin_s``) the rate's shape over time, bin by bin: a daily
  curve. The renewal process then runs in "operational time", where the rate is
  flat, and is warped back through the curve, repeated as often as needed. The
  shape is fitted to operational-time gaps, so a rush hour does not pass for
  burstiness.

It keeps no sessions and no prefix sharing; a replay of the archive itself keeps
those (docs/fit.md).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats  # type: ignore[import-untyped]

from tailreplay.errors import InputError, UsageError
from tailreplay.traces.columns import load_columns
from tailreplay.traces.format import make_header
from tailreplay.traces.record import Record
from tailreplay.traces.writer import write_archive

__all__ = ["Dist", "Workload", "fit", "synthesize"]

MODEL_VERSION = 1
FIT_SAMPLE = 200_000
"""Values a distribution is fitted to at most (a seeded random subset beyond that)."""
MAX_SYNTH = 50_000_000

Array = npt.NDArray[Any]


@dataclass(frozen=True)
class Dist:
    """A two-parameter distribution on (0, inf): ``weibull`` or ``gamma``."""

    family: str
    shape: float
    scale: float
    loglik: float | None = None
    ks: float | None = None
    """Kolmogorov-Smirnov distance to the data it was fitted to (0 is a perfect fit)."""

    @property
    def mean(self) -> float:
        if self.family == "weibull":
            return self.scale * math.gamma(1 + 1 / self.shape)
        return self.shape * self.scale

    def with_mean(self, mean: float) -> Dist:
        return Dist(self.family, self.shape, self.scale * mean / self.mean)

    def sample(self, rng: np.random.Generator, n: int) -> Array:
        if self.family == "weibull":
            out: Array = self.scale * rng.weibull(self.shape, n)
        else:
            out = rng.gamma(self.shape, self.scale, n)
        return out

    def frozen(self) -> Any:
        family = stats.weibull_min if self.family == "weibull" else stats.gamma
        return family(self.shape, loc=0, scale=self.scale)


@dataclass(frozen=True)
class Workload:
    records: int
    duration_s: float
    rate_rps: float
    arrivals: Dist
    arrivals_other: Dist
    """The family not chosen, for comparison."""
    input_tokens: Dist
    output_tokens: Dist
    max_input_tokens: int
    max_output_tokens: int
    stream_share: float
    models: dict[str, float]
    paths: dict[str, float]
    profile_bin_s: float | None = None
    rate_profile: list[float] | None = None
    """Each bin's rate over the mean (the bins' mean is 1), or None: a flat rate."""

    def to_json(self) -> dict[str, Any]:
        return {"format": "tailreplay-workload", "version": MODEL_VERSION, **asdict(self)}

    @classmethod
    def load(cls, path: Path) -> Workload:
        """The model in the JSON file ``path`` (what ``traces fit`` wrote)."""
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: not a workload model ({exc})") from None
        return cls.from_json(data if isinstance(data, dict) else {}, str(path))

    def describe(self) -> list[str]:
        """The model in a few lines: what ``traces fit`` prints."""
        a, o = self.arrivals, self.arrivals_other
        lines = [
            f"{self.records:,} records over {self.duration_s:,.1f} s, {self.rate_rps:,.2f} req/s",
            f"arrivals: {a.family} shape {a.shape:.3f} (KS {a.ks:.3f}); "
            f"{o.family} shape {o.shape:.3f} (KS {o.ks:.3f}) fits worse",
        ]
        for name, d in (("input tokens", self.input_tokens), ("output tokens", self.output_tokens)):
            lines.append(f"{name}: gamma shape {d.shape:.3f} mean {d.mean:,.0f} (KS {d.ks:.3f})")
        if self.rate_profile is not None:
            lo, hi = min(self.rate_profile), max(self.rate_profile)
            lines.append(
                f"rate curve: {len(self.rate_profile)} bins of {self.profile_bin_s:g} s, "
                f"{lo:.2f}x to {hi:.2f}x the mean"
            )
        return lines

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Workload:
        if data.get("format") != "tailreplay-workload":
            raise InputError(f"{where}: not a tailreplay workload model (see `traces fit`)")
        if data.get("version") != MODEL_VERSION:
            raise InputError(f"{where}: workload model version {data.get('version')} "
                             f"is not {MODEL_VERSION}")  # fmt: skip
        try:
            fields = {k: v for k, v in data.items() if k not in ("format", "version")}
            for key in ("arrivals", "arrivals_other", "input_tokens", "output_tokens"):
                fields[key] = Dist(**fields[key])
            return cls(**fields)
        except (TypeError, KeyError) as exc:
            raise InputError(f"{where}: malformed workload model ({exc})") from None


def fit(
    paths: Iterable[str | os.PathLike[str]],
    *,
    skip_corrupt: bool = False,
    seed: int = 0,
    profile_bin_s: float | None = None,
) -> Workload:
    """Fit a workload model to the records of ``paths`` (with a rate curve of bins
    ``profile_bin_s`` long when given)."""
    paths = list(paths)
    cols = load_columns(paths, ["input_tokens", "output_tokens", "stream"],
                        skip_corrupt=skip_corrupt)  # fmt: skip
    if cols.n < 10:
        raise InputError(f"{cols.n} records are too few to fit a workload (at least 10)")
    rng = np.random.default_rng(seed)
    starts = cols["start_ns"]
    duration_s = float(starts[-1] - starts[0]) / 1e9
    offsets = (starts - starts[0]).astype(np.float64) / 1e9
    profile = None
    if profile_bin_s is not None:
        profile = _rate_profile(offsets, duration_s, profile_bin_s)
        offsets = _operational(offsets, profile, profile_bin_s)
    gaps = np.diff(offsets)
    positive = gaps[gaps > 0]
    if positive.size < 2:
        raise InputError("the records do not spread over time: no arrival process to fit")
    # Requests stamped in the same clock tick have a gap of 0, which neither family
    # allows; they get half the smallest gap seen, as if the clock were finer.
    gaps = np.where(gaps > 0, gaps, positive.min() / 2)
    weibull, gamma = _fit_both(_subset(gaps, rng))
    arrivals, other = weibull, gamma
    if (gamma.loglik if gamma.loglik is not None else 0) > (
        weibull.loglik if weibull.loglik is not None else 0
    ):
        arrivals, other = gamma, weibull
    tokens = {}
    for name in ("input_tokens", "output_tokens"):
        values = cols.where(name)
        values = values[values > 0].astype(np.float64)
        if values.size < 10:
            raise InputError(f"too few records with {name} to fit their lengths")
        tokens[name] = (_fit(stats.gamma, "gamma", _subset(values, rng)), int(values.max()))
    reader_paths = [str(p) for p in paths]
    models, route = _shares(reader_paths, skip_corrupt)
    return Workload(
        records=cols.n,
        duration_s=duration_s,
        rate_rps=(cols.n - 1) / duration_s,
        arrivals=arrivals,
        arrivals_other=other,
        input_tokens=tokens["input_tokens"][0],
        output_tokens=tokens["output_tokens"][0],
        max_input_tokens=tokens["input_tokens"][1],
        max_output_tokens=tokens["output_tokens"][1],
        stream_share=float(cols.where("stream").mean()) if cols.present["stream"].any() else 1.0,
        models=models,
        paths=route,
        profile_bin_s=profile_bin_s,
        rate_profile=[float(f) for f in profile] if profile is not None else None,
    )


_FLOOR = 1e-3
"""Least rate factor of a bin: an empty bin stays (almost) empty and time stays invertible."""


def _rate_profile(offsets: Array, duration_s: float, bin_s: float) -> Array:
    """Each bin's request rate over the mean; the last, partial bin by its own length."""
    if bin_s <= 0:
        raise UsageError("--profile must be positive")
    nbins = math.ceil(duration_s / bin_s)
    if nbins < 2:
        raise UsageError(
            f"--profile {bin_s:g}s is not shorter than the recording ({duration_s:g} s)"
        )
    which = np.minimum((offsets // bin_s).astype(np.int64), nbins - 1)
    counts = np.bincount(which, minlength=nbins).astype(np.float64)
    widths = np.full(nbins, bin_s)
    widths[-1] = max(duration_s - bin_s * (nbins - 1), bin_s * 1e-3)
    factors = np.maximum(counts / widths, _FLOOR * counts.sum() / duration_s)
    result: Array = factors / factors.mean()
    return result


def _operational(times: Array, profile: Array, bin_s: float) -> Array:
    """Real times to operational times: the integral of the rate factor up to each."""
    edges = np.concatenate([[0.0], np.cumsum(profile * bin_s)])
    which = np.minimum((times // bin_s).astype(np.int64), profile.size - 1)
    out: Array = edges[which] + profile[which] * (times - which * bin_s)
    return out


def _real(op: Array, profile: Array, bin_s: float) -> Array:
    """Operational times back to real ones, the curve repeated period after period."""
    edges = np.concatenate([[0.0], np.cumsum(profile * bin_s)])
    period_op, period = edges[-1], bin_s * profile.size
    cycles = np.floor(op / period_op)
    within = op - cycles * period_op
    out: Array = cycles * period + np.interp(within, edges, bin_s * np.arange(profile.size + 1))
    return out


def _subset(values: Array, rng: np.random.Generator) -> Array:
    if values.size <= FIT_SAMPLE:
        return values
    picked: Array = rng.choice(values, FIT_SAMPLE, replace=False)
    return picked


def _fit_both(gaps: Array) -> tuple[Dist, Dist]:
    return _fit(stats.weibull_min, "weibull", gaps), _fit(stats.gamma, "gamma", gaps)


_POINT_SHAPE = 1e6
"""Shape standing for "always the same value" (a fixed-length benchmark, even spacing)."""


def _fit(family: Any, name: str, values: Array) -> Dist:
    mean = float(values.mean())
    if float(values.std()) <= mean * 1e-9:
        # No spread: maximum likelihood has no optimum (scipy fails); a point mass is
        # what the data say, and both families reach it as the shape grows.
        scale = mean if name == "weibull" else mean / _POINT_SHAPE
        return Dist(name, _POINT_SHAPE, scale, None, 0.0)
    try:
        shape, _, scale = family.fit(values, floc=0)
    except (ValueError, RuntimeError, FloatingPointError):
        if name == "weibull":  # the other family is fitted too and will be kept
            return Dist(name, 1.0, mean, -math.inf, 1.0)
        var = float(values.var())  # Gamma by moments when the optimiser gives up
        shape, scale = mean * mean / var, var / mean
    frozen = family(shape, loc=0, scale=scale)
    loglik = float(np.sum(frozen.logpdf(values)))
    ks = float(stats.kstest(values, frozen.cdf).statistic)
    return Dist(name, float(shape), float(scale), loglik, ks)


def _shares(paths: list[str], skip_corrupt: bool) -> tuple[dict[str, float], dict[str, float]]:
    from tailreplay.traces.reader import ArchiveReader

    models: Counter[str] = Counter()
    routes: Counter[str] = Counter()
    for m in ArchiveReader(paths, skip_corrupt=skip_corrupt, order="file").iter_maps():
        models[str(m.get("model") or "")] += 1
        routes[str(m.get("path") or "/v1/chat/completions")] += 1

    def share(c: Counter[str]) -> dict[str, float]:
        total = sum(c.values())
        return {k: v / total for k, v in c.most_common()}

    return share(models), share(routes)


def synthesize(
    workload: Workload,
    out: Path,
    *,
    duration_s: float | None = None,
    count: int | None = None,
    rate_rps: float | None = None,
    seed: int = 0,
    start_ns: int | None = None,
    flat: bool = False,
) -> int:
    """Write a synthetic archive drawn from ``workload``; returns the records written.

    It stops at ``count`` records or ``duration_s`` seconds, whichever comes first
    (at least one must be given); ``rate_rps`` defaults to the fitted rate and is the
    mean over the rate curve, if the model has one and ``flat`` is not set.
    """
    if count is None and duration_s is None:
        raise UsageError("give --count or --duration (or both) to bound the synthesis")
    rate = rate_rps if rate_rps is not None else workload.rate_rps
    if rate <= 0:
        raise UsageError("the rate must be positive")
    # Bounded before anything is written: a typo in --duration must not fill the disk.
    bounds = [count] if count is not None else []
    if duration_s is not None:
        bounds.append(int(rate * duration_s * 1.2) + 10)  # 20% over the mean: bursts
    if min(bounds) > MAX_SYNTH:
        raise UsageError(f"that is over {MAX_SYNTH:,} records; synthesise in parts")
    rng = np.random.default_rng(seed)
    arrivals = workload.arrivals.with_mean(1.0 / rate)
    t0 = start_ns if start_ns is not None else 1_700_000_000 * 10**9
    header = make_header("synth", ordered=True, extra={"workload": workload.to_json(),
                                                       "rate_rps": rate, "seed": seed})  # fmt: skip
    profile = None
    if workload.rate_profile is not None and workload.profile_bin_s and not flat:
        profile = (np.array(workload.rate_profile), workload.profile_bin_s)
    records = _records(workload, arrivals, rng, t0, duration_s, count, profile)
    return write_archive(out, header, records)


def _records(
    workload: Workload,
    arrivals: Dist,
    rng: np.random.Generator,
    t0: int,
    duration_s: float | None,
    count: int | None,
    profile: tuple[Array, float] | None,
) -> Iterator[Record]:
    models = list(workload.models)
    model_p = np.array(list(workload.models.values()))
    routes = list(workload.paths)
    route_p = np.array(list(workload.paths.values()))
    t = 0.0
    n = 0
    end = duration_s if duration_s is not None else math.inf
    limit = count if count is not None else MAX_SYNTH
    while n < limit:
        batch = min(65_536, limit - n)
        gaps = arrivals.sample(rng, batch)
        op = t + np.cumsum(gaps)
        times = _real(op, *profile) if profile is not None else op
        inputs = _lengths(workload.input_tokens, workload.max_input_tokens, rng, batch)
        outputs = _lengths(workload.output_tokens, workload.max_output_tokens, rng, batch)
        streamed = rng.random(batch) < workload.stream_share
        model_i = rng.choice(len(models), batch, p=model_p) if models else None
        route_i = rng.choice(len(routes), batch, p=route_p)
        ids = rng.bytes(24 * batch)
        for i in range(batch):
            if times[i] >= end:
                return
            yield Record(
                start_ns=t0 + round(float(times[i]) * 1e9),
                trace_id=ids[24 * i : 24 * i + 16],
                span_id=ids[24 * i + 16 : 24 * i + 24],
                method="POST",
                path=routes[route_i[i]],
                model=(models[model_i[i]] or None) if model_i is not None else None,
                stream=bool(streamed[i]),
                input_tokens=int(inputs[i]),
                output_tokens=int(outputs[i]),
            )
            n += 1
        t = float(op[-1])


def _lengths(dist: Dist, most: int, rng: np.random.Generator, n: int) -> Array:
    """Token counts: whole, at least 1, at most the largest recorded."""
    values: Array = np.clip(np.ceil(dist.sample(rng, n)), 1, most).astype(np.int64)
    return values
