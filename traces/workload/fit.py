"""Workload models: fitted to an archive, then synthesised at any rate and length.

A model is an arrival process (``traces.arrivals``: a renewal process or a
Markov-modulated Poisson process, whichever reproduces the recording's
burstiness), request shapes drawn jointly (``traces.lengths``: input and output
tokens together), and the shares of streamed requests, models and paths.

Every part reports how well it fits, and ``warnings`` says where it does not:
a Kolmogorov-Smirnov distance above ``KS_WARN``, or an index of dispersion more
than ``IDC_WARN`` off the recording's — above all a model less bursty than
Poisson for traffic that is burstier. ``fit`` prints them and ``synth`` repeats
them, so a poor model is never used silently (docs/fit.md). The model's type, file
and checks are in ``workload_model.py``.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.dialects import DEFAULT_ROUTE
from tailreplay.errors import InputError, UsageError
from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.validate import CLOCK_END_NS
from tailreplay.traces.workload.arrivals import (
    Arrivals,
    Batch,
    arrival_states,
    fit_arrivals,
    sample_times,
)
from tailreplay.traces.workload.drift import LengthDrift, length_drift
from tailreplay.traces.workload.lengths import Lengths, fit_lengths
from tailreplay.traces.workload.model_checks import MAX_RATE
from tailreplay.traces.workload.prefixes import FIT_REQUESTS, PrefixDraw, PrefixReuse, fit_prefixes
from tailreplay.traces.workload.renewal import Dist
from tailreplay.traces.workload.scaling import SCALINGS, USERS
from tailreplay.traces.workload.workload_model import Workload

__all__ = ["IDC_WARN", "KS_WARN", "at_exact_rate", "fit", "synthesize"]

KS_WARN = 0.10
"""A Kolmogorov-Smirnov distance above this is a poor fit: warned."""
IDC_WARN = 0.25
"""A model's index of dispersion further than this share from the recording's (and than
three times the recording's own standard error there) is warned."""
FIT_SAMPLE = 200_000
"""Values the length model is fitted to at most (a seeded random subset beyond that)."""
MAX_SYNTH = 50_000_000
MAX_SPAN_S = 10 * 365 * 86400.0
"""Longest span a synthesis may need (ten years) before it is refused."""
ARRIVALS = ("model", "poisson")

Array = npt.NDArray[Any]


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
    cols = load_columns(
        paths, ["input_tokens", "output_tokens", "stream"], skip_corrupt=skip_corrupt
    )
    if cols.n < 10:
        raise InputError(f"{cols.n} records are too few to fit a workload (at least 10)")
    rng = np.random.default_rng(seed)
    starts = cols["start_ns"]
    arrivals = fit_arrivals(starts, rng, profile_bin_s)
    both = cols.present["input_tokens"] & cols.present["output_tokens"]
    inputs, outputs = cols["input_tokens"][both], cols["output_tokens"][both]
    usable = (inputs > 0) & (outputs > 0)
    if int(usable.sum()) < 10:
        raise InputError(
            "too few records with both input_tokens and output_tokens to fit "
            "their lengths (at least 10)"
        )
    pick = _subset(np.flatnonzero(usable), rng)
    lengths = fit_lengths(inputs[pick], outputs[pick], rng)
    states = arrival_states(arrivals, starts)
    if states is not None:
        posteriors, bin_of = states
        lengths = _by_state(lengths, inputs[pick], outputs[pick], posteriors[bin_of[both][pick]])
        states = posteriors, bin_of[both][usable]
    drift, recent = _recent(starts[both][usable], inputs[usable], outputs[usable], states, rng)
    models, route, prefixes = _shares([str(p) for p in paths], skip_corrupt)
    duration_s = float(starts[-1] - starts[0]) / 1e9
    return Workload(
        records=cols.n,
        duration_s=duration_s,
        rate_rps=(cols.n - 1) / duration_s,
        arrivals=arrivals,
        lengths=lengths,
        stream_share=float(cols.where("stream").mean()) if cols.present["stream"].any() else 1.0,
        models=models,
        paths=route,
        warnings=_warnings(arrivals, lengths, duration_s)
        + ([drift.describe()] if drift is not None and drift.drifted else []),
        length_drift=drift,
        recent_lengths=recent,
        prefix_reuse=prefixes,
    )


def _recent(
    starts: Array,
    inputs: Array,
    outputs: Array,
    states: tuple[Array, Array] | None,
    rng: np.random.Generator,
) -> tuple[LengthDrift | None, Lengths | None]:
    """The drift of the lengths between the span's halves, and the lengths fitted to
    its second half (both None when the halves hold too few requests to tell), with
    each arrival state's shares when ``states`` (``arrival_states``: the bins'
    posteriors and each request's bin) are given."""
    order = np.argsort(starts, kind="stable")
    starts, inputs, outputs = starts[order], inputs[order], outputs[order]
    drift = length_drift(starts, inputs, outputs)
    if drift is None:
        return None, None
    middle = starts[0] + (starts[-1] - starts[0]) / 2
    second = np.flatnonzero(starts >= middle)
    pick = _subset(second, rng)
    recent = fit_lengths(inputs[pick], outputs[pick], rng)
    if states is not None:
        posteriors, bin_of = states
        recent = _by_state(recent, inputs[pick], outputs[pick], posteriors[bin_of[order][pick]])
    return drift, recent


def _by_state(lengths: Lengths, inputs: Array, outputs: Array, states: Array) -> Lengths:
    """``lengths`` with each arrival state's shares of its components, from requests
    whose state probabilities are ``states``."""
    return lengths.by_state(lengths.densities(inputs, outputs), states)


def _warnings(a: Arrivals, n: Lengths, duration_s: float) -> list[str]:
    out = []
    if a.kind == "renewal" and a.renewal is not None and (a.renewal.ks or 0) > KS_WARN:
        out.append(f"the gap distribution fits poorly (KS {a.renewal.ks:.3f} > {KS_WARN})")
    for w, r, m in zip(*(a.burstiness[k] for k in ("windows_s", "recorded", "model")), strict=True):
        if r is None or m is None or w is None:
            continue
        if r > 1.1 and m < 1:
            out.append(
                f"the model is less bursty than Poisson at {w:g} s (index of dispersion "
                f"{m:.2f}) where the recording is burstier ({r:.2f})"
            )
        # A recording holds few long windows, so its own index there is uncertain: the
        # relative standard error of a variance from W windows is sqrt(2 / (W - 1)) for
        # normal counts, and larger for bursty ones; within three of those is no news.
        elif abs((m + 0.01) / (r + 0.01) - 1) > max(
            IDC_WARN, 3 * math.sqrt(2 / max(duration_s / w - 1, 1))
        ):
            out.append(
                f"the model's index of dispersion at {w:g} s is {m:.2f}, the recording's {r:.2f}"
            )
    for name, ks in (("input", n.ks_input), ("output", n.ks_output)):
        if ks > KS_WARN:
            out.append(f"the {name} length model fits poorly (KS {ks:.3f} > {KS_WARN})")
    return out


def _subset(values: Array, rng: np.random.Generator) -> Array:
    if values.size <= FIT_SAMPLE:
        return values
    picked: Array = rng.choice(values, FIT_SAMPLE, replace=False)
    return picked


def _shares(
    paths: list[str], skip_corrupt: bool
) -> tuple[dict[str, float], dict[str, float], PrefixReuse | None]:
    """The shares of models and routes, and the prompts' prefix reuse (from the first
    ``FIT_REQUESTS`` records with ``prefix_hashes``, put in time order)."""
    from tailreplay.traces.archive.reader import ArchiveReader

    models: Counter[str] = Counter()
    routes: Counter[str] = Counter()
    hashed: list[tuple[int, list[int]]] = []
    for m in ArchiveReader(paths, skip_corrupt=skip_corrupt, order="file").iter_maps():
        models[str(m.get("model") or "")] += 1
        routes[str(m.get("path") or DEFAULT_ROUTE)] += 1
        hashes = m.get("prefix_hashes")
        if hashes and len(hashed) < FIT_REQUESTS:
            hashed.append((int(m["start_ns"]), hashes))

    def share(c: Counter[str]) -> dict[str, float]:
        total = sum(c.values())
        return {k: v / total for k, v in c.most_common()}

    hashed.sort(key=lambda pair: pair[0])
    return share(models), share(routes), fit_prefixes([h for _, h in hashed])


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
    arrivals: str = "model",
    exact_rate: bool = False,
    lengths: str = "all",
    scaling: str = USERS,
) -> int:
    """Write a synthetic archive drawn from ``workload``; returns the records written.

    It stops at ``count`` records or ``duration_s`` seconds, whichever comes first
    (at least one must be given); ``rate_rps`` defaults to the fitted rate and is the
    mean over the rate curve, if the model has one and ``flat`` is not set.
    ``arrivals="poisson"`` replaces the fitted arrival process by a Poisson process
    of the same mean rate (and curve), keeping every request's shape: the same seed
    gives the same requests in the same order, only their times differ.
    ``exact_rate`` (with ``count``): the times are stretched so that their mean rate
    is ``rate_rps`` exactly, not only on average over draws (``at_exact_rate``).
    ``lengths="recent"`` draws the request lengths fitted to the second half of the
    recording's span (``Workload.recent_lengths``), for a mix that drifted.
    ``scaling`` is how an MMPP reaches a rate other than its own (``SCALINGS``:
    ``users`` as many independent users, ``periods`` its own periods at that rate).
    """
    if count is None and duration_s is None:
        raise UsageError("give --count or --duration (or both) to bound the synthesis")
    if arrivals not in ARRIVALS:
        raise UsageError(f"arrivals must be one of {', '.join(ARRIVALS)}")
    if scaling not in SCALINGS:
        raise UsageError(f"scaling must be one of {', '.join(SCALINGS)}")
    rate = rate_rps if rate_rps is not None else workload.rate_rps
    if not 0 < rate <= MAX_RATE:
        raise UsageError(f"the rate must be above 0 and at most {MAX_RATE:,.0f} req/s")
    t0 = start_ns if start_ns is not None else 1_700_000_000 * 10**9
    _check_bounds(count, duration_s, rate, t0)
    workload = replace(workload, lengths=workload.lengths_for(lengths))
    model = workload.arrivals
    if arrivals == "poisson":
        model = replace(model, kind="renewal", renewal=Dist("gamma", 1.0, 1.0))
    header = make_header(
        "synth",
        ordered=True,
        extra={
            "workload": workload.to_json(),
            "rate_rps": rate,
            "seed": seed,
            "arrivals": arrivals,
            "lengths": lengths,
            "scaling": scaling,
        },
    )
    # Separate streams: the request shapes do not depend on the arrival process drawn.
    times_rng, shapes_rng = (np.random.default_rng([seed, k]) for k in (0, 1))
    times = sample_times(model, times_rng, rate, flat=flat, scaling=scaling)
    if exact_rate and count is not None:
        within_rng = np.random.default_rng([seed, 2])
        times = at_exact_rate(times, count, rate, model.clock.tick_s, within_rng)
    # The prefixes, in request order on a stream of their own: the n-th request shares
    # the same blocks whatever arrival process is drawn beside it.
    reuse = workload.prefix_reuse
    prefixes = PrefixDraw(reuse, np.random.default_rng([seed, 3])) if reuse is not None else None
    records = _records(workload, times, shapes_rng, t0, duration_s, count, prefixes)
    return write_archive(out, header, records)


def _check_bounds(count: int | None, duration_s: float | None, rate: float, t0_ns: int) -> None:
    """Refuse, before anything is written, a synthesis that would fill the disk (a
    typo in --duration), run for ages over empty bins, or reach past the archive's
    clock (``CLOCK_END_NS``: early 2116), where its records could not be kept."""
    if duration_s is not None and duration_s <= 0:
        raise UsageError("--duration must be positive")
    bounds = [count] if count is not None else []
    if duration_s is not None:
        bounds.append(int(rate * duration_s * 1.2) + 10)  # 20% over the mean: bursts
    if min(bounds) > MAX_SYNTH:
        raise UsageError(f"that is over {MAX_SYNTH:,} records; synthesise in parts")
    # The span it may need: the duration, or the count's at 20% under the rate.
    spans = [duration_s] if duration_s is not None else []
    if count is not None:
        spans.append(count / rate * 1.2)
    span_s = min(spans)
    if span_s > MAX_SPAN_S:
        what = "--duration" if span_s == duration_s else f"{count:,} requests at {rate:g} req/s"
        advice = "give --duration too" if duration_s is None else "give less"
        raise UsageError(f"{what} would span {_years(span_s)}, over ten years; {advice}")
    if t0_ns + span_s * 1e9 >= CLOCK_END_NS:
        raise UsageError(
            f"the trace would run past early 2116 (the archive's clock ends there): "
            f"start it earlier or make it shorter than {_years((CLOCK_END_NS - t0_ns) / 1e9)}"
        )


def _years(seconds: float) -> str:
    years = seconds / (365 * 86400)
    if years >= 1e6:
        return "over a million years"
    return f"{years:,.1f} years" if years < 10 else f"{years:,.0f} years"


def at_exact_rate(
    times: Iterator[Batch],
    count: int,
    rate: float,
    tick: float | None,
    rng: np.random.Generator,
) -> Iterator[Batch]:
    """The first ``count`` times, stretched so that their mean rate (``count - 1`` gaps
    over their span) is ``rate``, and put back on the clock's ticks if it has them.
    ``validate-model`` compares a window with syntheses at its rate: near a target's
    limit the P99 moves more with a few percent of load (a draw of a bursty process
    of 3,000 requests spans ±3% of its mean) than with the arrival process compared.

    On ticks, a time is a tick's grid point: where in the tick the request came is
    drawn (uniform, as both arrival models place a tick's requests) before the
    stretch, and the stretched time is floored onto the grid as the recording's clock
    floored it. Stretching the grid points themselves and flooring them would empty
    a grid point every ``1 / (stretch - 1)`` ticks (or double one when shrinking): a
    Poisson arm stretched 2% had an index of dispersion of 1.6 at the tick, not 1."""
    parts: list[Array] = []
    marks: list[Array] = []
    n, marked = 0, True
    for batch, mark, _ in times:
        parts.append(batch)
        if mark is None:
            marked = False
        else:
            marks.append(mark)
        n += batch.size
        if n >= count:
            break
    t = np.concatenate(parts)[:count]
    states = np.concatenate(marks)[:count] if marked and marks else None
    if tick is not None and t.size:
        t = t + rng.random(t.size) * tick
        order = np.argsort(t, kind="stable")
        t, states = t[order], (states[order] if states is not None else None)
    span = float(t[-1] - t[0]) if t.size > 1 else 0.0
    if span > 0:
        t = t[0] + (t - t[0]) * ((t.size - 1) / rate / span)
    if tick is not None:
        t = np.floor(t / tick) * tick
    yield t, states, math.inf


def _records(
    workload: Workload,
    times: Iterator[Batch],
    rng: np.random.Generator,
    t0: int,
    duration_s: float | None,
    count: int | None,
    prefixes: PrefixDraw | None,
) -> Iterator[Record]:
    end = duration_s if duration_s is not None else math.inf
    limit = count if count is not None else MAX_SYNTH
    shapes = _shapes(workload, rng)
    n = 0
    for batch, states, horizon in times:
        k = min(int(np.searchsorted(batch, end, side="left")), limit - n)
        drawn = [next(shapes) for _ in range(k)]
        # Each request's lengths from its arrival state's shares (``Lengths.draw``),
        # a batch at a time.
        u = np.array([d.u for d in drawn])
        z = np.array([d.z for d in drawn]).reshape(k, 2)
        inputs, outputs = workload.lengths.draw(u, z, states[:k] if states is not None else None)
        for t, shape, tokens_in, tokens_out in zip(
            batch[:k].tolist(), drawn, inputs.tolist(), outputs.tolist(), strict=True
        ):
            yield Record(
                start_ns=t0 + round(t * 1e9),
                trace_id=shape.ids[:16],
                span_id=shape.ids[16:],
                method="POST",
                path=shape.path,
                model=shape.model,
                stream=shape.stream,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                prefix_hashes=prefixes.hashes(tokens_in) if prefixes is not None else None,
            )
        n += k
        if k < batch.size or horizon >= end:
            return  # past the end or the count; or a quiet stretch past the end


@dataclass(frozen=True, slots=True)
class _Shape:
    path: str
    model: str | None
    stream: bool
    u: float
    """The uniform that picks the lengths' component (``Lengths.draw``)..."""
    z: tuple[float, float]
    """...and the standard normal pair that places them in it."""
    ids: bytes


def _shapes(workload: Workload, rng: np.random.Generator) -> Iterator[_Shape]:
    """Request shapes, drawn in blocks of a fixed size so that the n-th request is the
    same whatever arrival process is drawn beside it (its lengths too, wherever its
    arrival state's shares pick the same component)."""
    models = list(workload.models)
    # Shares sum to 1 within 1e-6 (model_checks.py); numpy's draw wants closer.
    model_p = np.array(list(workload.models.values()))
    model_p = model_p / model_p.sum() if models else model_p
    routes = list(workload.paths)
    route_p = np.array(list(workload.paths.values()))
    route_p = route_p / route_p.sum()
    block = 65_536
    while True:
        u = rng.random(block).tolist()
        z = rng.standard_normal((block, 2)).tolist()
        streamed = rng.random(block) < workload.stream_share
        model_i = rng.choice(len(models), block, p=model_p) if models else None
        route_i = rng.choice(len(routes), block, p=route_p)
        ids = rng.bytes(24 * block)
        for i in range(block):
            model = (models[model_i[i]] or None) if model_i is not None else None
            yield _Shape(
                routes[route_i[i]],
                model,
                bool(streamed[i]),
                u[i],
                (z[i][0], z[i][1]),
                ids[24 * i : 24 * i + 24],
            )
