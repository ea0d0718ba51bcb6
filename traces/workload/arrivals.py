"""Arrival models: fitted to recorded start times, then sampled at any rate.

Candidates are fitted and the one that reproduces the recording's burstiness best
is kept: its index of dispersion over windows from 1 s to 5 min (see
``traces.burstiness``), compared on a long simulation of each. Likelihoods cannot
decide: one candidate models gaps, the others counts, and BIC on 1 s counts
favours short-term detail over the slow modulation a P99 depends on.

- ``renewal``: independent Weibull or Gamma gaps (``traces.renewal``). Exact for
  clustered but memoryless traffic; it cannot hold busy spells that last.
- ``mmpp``: a Markov-modulated Poisson process on counts per bin (``traces.hmm``),
  one candidate for each number of states: states with their own rates and
  sojourn times hold rush minutes and lulls.

A quantised clock (``traces.clock``) hides the gaps — they are ticks and ties —
but not the counts over whole ticks, which are the same with or without it: the
renewal's shape is then the one whose counts have the recording's burstiness
(``_tick_renewal``), and the MMPP's bin is the tick. Synthesis stamps requests on
ticks as the recording did. With ``profile_bin_s`` the rate's curve over time
is kept apart: the renewal runs in operational time (the curve divided out), the
MMPP takes the curve as each bin's exposure.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import optimize  # type: ignore[import-untyped]

from tailreplay.errors import InputError, UsageError
from tailreplay.traces.workload.burstiness import WINDOWS_S, index_of_dispersion
from tailreplay.traces.workload.clock import Clock, on_ticks
from tailreplay.traces.workload.hmm import Mmpp, fit_mmpps
from tailreplay.traces.workload.periods import conditioned
from tailreplay.traces.workload.renewal import Dist, fit_gaps
from tailreplay.traces.workload.scaling import PERIODS, USERS

__all__ = ["Arrivals", "Batch", "arrival_states", "fit_arrivals", "sample_times"]

Array = npt.NDArray[Any]
SELECT_WINDOWS_S = (1.0, 3.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_MAX_BINS = 20_000
"""Most bins the MMPP is fitted on (a longer recording gets wider bins)."""
_FLOOR = 1e-3
"""Least rate factor of a profile bin: an empty bin stays (almost) empty and time
stays invertible."""
_CHECK_ARRIVALS = 1_000_000
NOISE_Z = 2.0
"""A candidate's burstiness error counts only beyond this many standard errors of
the recording's own index: within them, Poisson fits as well as any model
fitted to the noise, and the simplest candidate is kept."""
_SCORE_SLACK = 0.25
"""A candidate scoring within 25% (+0.01) of the best counts as as good."""
_MAX_PROFILE_BINS = 100_000
"""Most bins of a rate curve (10-minute bins cover two years)."""
_MAX_CHECK_S = 2e7
"""Longest simulated check (230 days) unless the recording is longer."""
_MAX_BIN_ARRIVALS = 10_000_000
"""Most arrivals one MMPP bin may bring at the rate asked for (80 MB of times)."""


@dataclass(frozen=True)
class Arrivals:
    kind: str
    """``renewal`` or ``mmpp``: which candidate is sampled."""
    rate_rps: float
    clock: Clock
    renewal: Dist | None
    renewal_other: Dist | None
    mmpp: Mmpp
    scores: dict[str, float]
    """Per candidate: the weighted mean of |log(model IDC / recorded IDC)| beyond
    ``NOISE_Z`` standard errors of the recorded IDC, over SELECT_WINDOWS_S (see
    ``_score``); the simplest of the lowest is sampled (``_simplest``), so a
    candidate no better than Poisson (``mmpp-1``) is never chosen over it."""
    burstiness: dict[str, list[float | None]] = field(default_factory=dict)
    """``windows_s``, ``recorded`` and ``model``: the IDC at WINDOWS_S."""
    profile_bin_s: float | None = None
    rate_profile: list[float] | None = None


def fit_arrivals(
    starts_ns: Array, rng: np.random.Generator, profile_bin_s: float | None = None
) -> Arrivals:
    """The arrival model of sorted start times (ns)."""
    starts_ns, clock = on_ticks(starts_ns)
    times = (starts_ns - starts_ns[0]).astype(np.float64) / 1e9
    duration = float(times[-1])
    if duration <= 0 or np.unique(starts_ns).size < 3:
        raise InputError("the records do not spread over time: no arrival process to fit")
    rate = (times.size - 1) / duration
    profile = _rate_profile(times, duration, profile_bin_s) if profile_bin_s is not None else None
    mmpps = _fit_counts(times, clock, profile)
    model = Arrivals(
        "mmpp",
        rate,
        clock,
        None,
        None,
        mmpps[0],
        {},
        profile_bin_s=profile_bin_s,
        rate_profile=profile[0].tolist() if profile is not None else None,
    )
    if clock.tick_s is None:
        op = _operational(times, *profile) if profile is not None else times
        gaps = np.diff(op)
        positive = gaps[gaps > 0]
        # A few requests stamped in one tick (a fine clock) have a gap of 0, which
        # neither family allows; they get half the smallest gap seen.
        best, other = fit_gaps(np.where(gaps > 0, gaps, positive.min() / 2))
        model = replace(model, renewal=best, renewal_other=other)  # kept whichever is chosen
    windows = _windows(clock, duration)
    recorded = {w: index_of_dispersion(times, w) for w in windows}
    if clock.tick_s is not None and profile is None:
        model = replace(model, renewal=_tick_renewal(recorded, rate, duration, rng))
    candidates = {f"mmpp-{m.states}": replace(model, mmpp=m) for m in mmpps}
    if model.renewal is not None:
        candidates["renewal"] = replace(model, kind="renewal")
    scores = {}
    for k, c in candidates.items():
        try:
            scores[k] = _score(recorded, _idc(c, rng, duration, windows), duration, NOISE_Z)
        except UsageError:
            # No synthesis could draw it (a state's bin over _MAX_BIN_ARRIVALS: EM on a
            # few requests under a rate curve near 0 can make one): not a candidate.
            continue
    if not scores:
        raise InputError(
            "no arrival model of this recording can be synthesised: its rate curve "
            "crowds too many requests into one bin"
        )
    chosen = candidates[_simplest(scores)]
    shown = {w: index_of_dispersion(times, w) for w in WINDOWS_S}
    # Shown (and checked by users) from four times the arrivals the candidates were
    # ranked on: at 60 s a million arrivals of shape-0.6 renewal traffic still leave
    # the index uncertain by ~5%.
    shown_model = _idc(chosen, rng, duration, WINDOWS_S, arrivals=4 * _CHECK_ARRIVALS)
    burst: dict[str, list[float | None]] = {
        "windows_s": list(WINDOWS_S),
        "recorded": [shown[w] for w in WINDOWS_S],
        "model": [shown_model[w] for w in WINDOWS_S],
    }
    return replace(chosen, scores=scores, burstiness=burst)


Batch = tuple[Array, Array | None, float]
"""Arrival times (s, increasing), each one's MMPP state (None for a renewal process),
and the horizon: the time up to which every arrival has been drawn."""


def sample_times(
    model: Arrivals,
    rng: np.random.Generator,
    rate: float,
    *,
    flat: bool = False,
    scaling: str = USERS,
) -> Iterator[Batch]:
    """Arrival times (s from 0, increasing) at mean ``rate``, in batches, endlessly,
    with their states (a batch may be empty: a quiet stretch). ``scaling`` is one of
    ``scaling.SCALINGS``."""
    profile = _profile(model) if not flat else None
    if model.kind == "renewal":
        assert model.renewal is not None
        tick = model.clock.tick_s
        for times, horizon in _renewal_times(model.renewal.with_mean(1 / rate), rng, profile):
            if tick is not None:  # stamped on ticks as the recording was
                # the horizon's own tick may still get arrivals from the next batch
                times, horizon = np.floor(times / tick) * tick, math.floor(horizon / tick) * tick
            yield times, None, horizon
    else:
        if scaling == PERIODS:
            mmpp = conditioned(model.mmpp, rate)
        else:
            mmpp = model.mmpp.scaled(rate / model.mmpp.mean_rate)
            # A state clipped at 0 leaves the mean above the rate: every state's rate
            # times the same factor makes it exact (a second ``scaled`` would clip again).
            factor = rate / mmpp.mean_rate
            mmpp = replace(mmpp, rates=[r * factor for r in mmpp.rates])
        _check_bins(mmpp, rate, profile)
        yield from _mmpp_times(mmpp, model.clock, rng, profile)


def arrival_states(model: Arrivals, starts_ns: Array) -> tuple[Array, Array] | None:
    """Where the sorted ``starts_ns`` came in the model's MMPP states: each bin's
    probability of each state (``(bins, states)``, from the counts of the bins the
    MMPP was fitted on) and each start's bin, so request i's row is
    ``posteriors[bin_of[i]]`` (at most 20,000 bins: no row a request is kept). None
    when the model samples no MMPP or it has a single state."""
    if model.kind != "mmpp" or model.mmpp.states < 2:
        return None
    starts_ns, _ = on_ticks(starts_ns)
    times = (starts_ns - starts_ns[0]).astype(np.float64) / 1e9
    bin_s = model.mmpp.bin_s
    bins = max(int(float(times[-1]) // bin_s), 1)
    bin_of = np.minimum((times // bin_s).astype(np.int64), bins - 1)
    counts = np.bincount(bin_of, minlength=bins)
    exposure = _exposure(np.arange(bins) * bin_s + bin_s / 2, _profile(model))
    return model.mmpp.posteriors(counts, exposure), bin_of


def _profile(model: Arrivals) -> tuple[Array, float] | None:
    """The model's rate curve (each bin's factor, the bins' length), if it has one."""
    if model.rate_profile is None or not model.profile_bin_s:
        return None
    return np.array(model.rate_profile), model.profile_bin_s


def _check_bins(mmpp: Mmpp, rate: float, profile: tuple[Array, float] | None) -> None:
    """Refuse a rate at which one bin of the busiest state would hold more arrivals
    than memory should: a bin's arrivals are drawn at once."""
    busiest = max(mmpp.rates) * mmpp.bin_s * (float(max(profile[0])) if profile is not None else 1)
    if not busiest <= _MAX_BIN_ARRIVALS:
        raise UsageError(
            f"at {rate:g} req/s the model's busiest state brings {busiest:,.0f} requests "
            f"in one {mmpp.bin_s:g} s bin, over {_MAX_BIN_ARRIVALS:,}: synthesise at a "
            "lower rate"
        )


def _fit_counts(times: Array, clock: Clock, profile: tuple[Array, float] | None) -> list[Mmpp]:
    base = clock.tick_s if clock.tick_s is not None and clock.tick_s >= 1.0 else 1.0
    bin_s = base * max(1, math.ceil(float(times[-1]) / base / _MAX_BINS))
    bins = max(int(float(times[-1]) // bin_s), 1)
    which = (times // bin_s).astype(np.int64)
    counts = np.bincount(which[which < bins], minlength=bins)
    exposure = _exposure(np.arange(bins) * bin_s + bin_s / 2, profile)
    return fit_mmpps(counts, bin_s, exposure)


def _exposure(mid_s: Array, profile: tuple[Array, float] | None) -> Array | None:
    if profile is None:
        return None
    factors, bin_s = profile
    out: Array = factors[(mid_s // bin_s).astype(np.int64) % factors.size]
    return out


def _renewal_times(
    gaps: Dist, rng: np.random.Generator, profile: tuple[Array, float] | None
) -> Iterator[tuple[Array, float]]:
    t = 0.0
    while True:
        op = t + np.cumsum(gaps.sample(rng, 65_536))
        times = _real(op, *profile) if profile is not None else op
        yield times, float(times[-1])
        t = float(op[-1])


def _mmpp_times(
    mmpp: Mmpp, clock: Clock, rng: np.random.Generator, profile: tuple[Array, float] | None
) -> Iterator[Batch]:
    # About 65,536 arrivals a chunk at the busiest state's rate: memory follows the
    # chunk, not the rate, and a quiet model still covers time quickly.
    busiest = max(mmpp.rates) * mmpp.bin_s * (max(profile[0]) if profile is not None else 1.0)
    chunk = int(min(max(65_536 / max(busiest, 1e-9), 1), 65_536))
    start = 0
    state = None
    while True:
        mids = (start + np.arange(chunk)) * mmpp.bin_s + mmpp.bin_s / 2
        counts, path, state = mmpp.draw(rng, chunk, _exposure(mids, profile), state)
        bin_of = np.repeat(np.arange(start, start + chunk), counts)
        within = rng.random(bin_of.size) * mmpp.bin_s
        if clock.tick_s is not None:  # stamped on ticks, as the recording was
            within = np.floor(within / clock.tick_s) * clock.tick_s
        times = bin_of * mmpp.bin_s + within
        order = np.argsort(times, kind="stable")  # bins in order: only within a bin
        start += chunk
        yield times[order], np.repeat(path, counts)[order], start * mmpp.bin_s


_SHAPES = np.geomspace(0.1, 5.0, 17)
"""Weibull shapes tried for a quantised renewal before refining around the best."""


def _tick_renewal(
    recorded: dict[float, float | None], rate: float, duration: float, rng: np.random.Generator
) -> Dist:
    """Weibull gaps at ``rate`` whose counts over the selection windows have the
    recorded index of dispersion (scored as candidates are). Every shape is tried on
    the same exponential draws (a Weibull gap is ``E ** (1 / shape)``), so the score
    is smooth in the shape and a bounded search finds its least."""
    n = int(min(max(_CHECK_ARRIVALS, duration * rate), 4 * _CHECK_ARRIVALS))
    draws = rng.standard_exponential(n)
    base = min(recorded)

    def score(log_shape: float) -> float:
        shape = math.exp(log_shape)
        times = np.cumsum(draws ** (1 / shape)) / (rate * math.gamma(1 + 1 / shape))
        return _score(recorded, _idc_on(times, base, recorded), duration)

    logs = np.log(_SHAPES)
    scores = [score(float(x)) for x in logs]
    i = int(np.argmin(scores))
    lo, hi = float(logs[max(i - 1, 0)]), float(logs[min(i + 1, logs.size - 1)])
    best = optimize.minimize_scalar(
        score, bounds=(lo, hi), method="bounded", options={"xatol": 0.01}
    ).x
    shape = math.exp(float(best))
    return Dist("weibull", shape, 1 / (rate * math.gamma(1 + 1 / shape)))


def _idc_on(times: Array, base: float, windows: Any) -> dict[float, float | None]:
    """IDC at ``windows`` (whole multiples of ``base``) from one count per ``base``
    window, summed up for the longer ones: one pass over the times, not one per window."""
    counts = np.bincount((times // base).astype(np.int64))[: int(times[-1] // base)]
    out: dict[float, float | None] = {}
    for w in windows:
        m = round(w / base)
        whole = counts[: counts.size // m * m].reshape(-1, m).sum(axis=1)
        mean = float(whole.mean()) if whole.size >= 10 else 0.0
        out[w] = float(whole.var()) / mean if mean > 0 else None
    return out


def _windows(clock: Clock, duration: float) -> list[float]:
    """The selection windows a recording of this clock and length can estimate."""
    tick = clock.tick_s
    usable = [w for w in SELECT_WINDOWS_S if duration / w >= 10]
    if tick is not None:
        usable = [w for w in usable if w >= tick and abs(w / tick - round(w / tick)) < 1e-9]
    if not usable:
        raise InputError(f"a recording of {duration:g} s is too short to measure burstiness")
    return usable


def _idc(
    model: Arrivals,
    rng: np.random.Generator,
    duration: float,
    windows: Any,
    arrivals: int = _CHECK_ARRIVALS,
) -> dict[float, float | None]:
    """The model's IDC at ``windows``, from a simulation of ``arrivals`` (at least
    the recording's span, at most the longer of it and ``_MAX_CHECK_S``). A million
    is 1,000 windows of a minute or more at 10 req/s, so the model's own estimate is
    within a few percent, and a sparse trace's check stays bounded."""
    span = min(max(arrivals / model.rate_rps, duration), max(duration, _MAX_CHECK_S))
    parts = []
    got = 0
    for batch, _, horizon in sample_times(model, rng, model.rate_rps):
        parts.append(batch[batch < span])
        got += batch.size
        if horizon >= span or got >= 4 * arrivals:
            break
    times = np.concatenate(parts)
    return {w: index_of_dispersion(times, w) for w in windows}


def _simplest(scores: dict[str, float]) -> str:
    """The candidate with the fewest parameters among those scoring within
    ``_SCORE_SLACK`` of the best: with seven candidates one fits the noise of a
    recording's long windows best, and the simpler model predicts as well."""
    best = min(scores.values())
    near = [k for k, v in scores.items() if v <= best * (1 + _SCORE_SLACK) + 0.01]
    return min(near, key=lambda k: (_parameters(k), scores[k]))


def _parameters(candidate: str) -> int:
    if candidate == "renewal":
        return 2
    k = int(candidate.removeprefix("mmpp-"))
    return k + k * (k - 1) + (k - 1)  # rates, transitions, initial shares


def _score(
    recorded: dict[float, float | None],
    model: dict[float, float | None],
    duration: float,
    noise_z: float = 0.0,
) -> float:
    """The precision-weighted mean of |log(model / recorded)| over the windows: a
    window's weight is the number of windows the recording holds (less one), as the
    variance of its estimate falls with it, so a minute seen 30 times does not
    outvote a second seen 1,800 times. +0.01: evenly spaced arrivals have an index of
    0, which a ratio cannot compare. With ``noise_z``, each window's distance counts
    only beyond ``noise_z`` standard errors of the recorded index (``_noise``)."""
    total = weight = 0.0
    for w, r in recorded.items():
        m = model.get(w)
        if r is None or m is None:
            continue
        n = duration / w - 1
        off = abs(math.log((m + 0.01) / (r + 0.01)))
        total += n * max(0.0, off - noise_z * _noise(n))
        weight += n
    return total / weight if weight else math.inf


def _noise(windows: float) -> float:
    """The standard error of the log of an index of dispersion estimated on
    ``windows`` + 1 windows: sqrt(2 / windows), that of a variance estimated on as
    many independent counts (bursty traffic's is larger, so this forgives less
    than the noise does)."""
    return math.sqrt(2 / max(windows, 1.0))


def _rate_profile(times: Array, duration_s: float, bin_s: float) -> tuple[Array, float]:
    """Each bin's request rate over the mean; the last, partial bin by its own length."""
    if not bin_s > 0:
        raise UsageError("--profile must be positive")
    nbins = math.ceil(duration_s / bin_s)
    if nbins > _MAX_PROFILE_BINS:
        raise UsageError(
            f"--profile {bin_s:g}s makes {nbins:,} bins of this recording; at "
            f"most {_MAX_PROFILE_BINS:,} (give at least "
            f"{math.ceil(duration_s / _MAX_PROFILE_BINS * 1000) / 1000:g}s)"
        )
    if nbins < 2:
        raise UsageError(
            f"--profile {bin_s:g}s is not shorter than the recording ({duration_s:g} s)"
        )
    which = np.minimum((times // bin_s).astype(np.int64), nbins - 1)
    counts = np.bincount(which, minlength=nbins).astype(np.float64)
    widths = np.full(nbins, bin_s)
    widths[-1] = max(duration_s - bin_s * (nbins - 1), bin_s * 1e-3)
    factors = np.maximum(counts / widths, _FLOOR * counts.sum() / duration_s)
    return factors / factors.mean(), bin_s


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
