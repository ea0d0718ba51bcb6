"""``tailreplay sim calibrate``: fit an ``EngineProfile`` to the results of a replay, so
the simulator can stand in for the engine that answered them (a digital twin).

The simulator's time model (``sim/batching.py``) is what is fitted. An engine step
lasts ``decode_base_ms + decode_per_seq_ms * batch`` for the sequences decoding, plus
``prefill_base_ms + prefill_per_token_ms * tokens`` when prompts are prefilled in it;
every sequence in the step gets its token at the step's end, a sequence whose prefill
ends in it its first. From the results alone (``calibration_data``):

- a request decodes from its first token to its last, so the batch at an instant is
  the number of requests whose decode spans it (``batch_sizes``);
- each inter-token gap is one step. The gaps whose step ended with another request's
  first token also held a prefill; the others (clean) give the decode cost against
  the batch (``fit_decode``);
- every request's token receptions, grouped into steps (``step_ends``), say when
  each step ended. A request's prefill ran in the step that ended with its first
  token, which began where the step before it ended, or at the request's send when
  that came later (an idle engine): that step's length less its decode cost is its
  prefill time, and the lower envelope of those times against the tokens computed
  (input less cached) gives the prefill cost (``fit_prefill``);
- the limits where the data show them (``calibration_limits``).

How well the fitted model explains its own input: each request's TTFT and latency
predicted from the batches it met, against what it measured.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from tailreplay.sim.calibration_data import Observed, UnusableResults, read_results
from tailreplay.sim.calibration_fits import (
    DECODE_MIN_GAPS,
    PREFILL_QUANTILE,
    Array,
    LineFit,
    batch_sizes,
    decode_steps,
    fit_decode,
    fit_prefill,
    prefill_steps,
    prefills_ending,
    step_times,
    with_prefill,
)
from tailreplay.sim.calibration_limits import Limits, fit_limits
from tailreplay.sim.calibration_window import WindowErrors, served_again
from tailreplay.sim.profiles import EngineProfile, fit_context

__all__ = [
    "MIN_REQUESTS",
    "Calibration",
    "Residuals",
    "Timeline",
    "calibrate",
    "calibrate_observed",
    "explain",
    "step_ends",
    "summary_lines",
]

MIN_REQUESTS = 30
"""Streamed answers a calibration needs at the least."""
MIN_CLEAN_PREFILLS = 30
"""Prefills alone in their step needed to fit on them only (else on every request)."""
MIN_IDLE_PREFILLS = 10
"""Requests that found the engine idle needed to fit the prefill on them only."""


@dataclass(frozen=True)
class Timeline:
    """The engine's steps as the results show them: when each request's prefill step
    began and ended, and the batch each step decoded."""

    first_s: Array
    """Each request's first token (NaN: not streamed)."""
    step_start_s: Array
    """When the step that prefilled each request began..."""
    step_end_s: Array
    """...and ended (its first token, or an earlier token of that step)."""
    step_batch: Array
    """How many requests that step decoded."""
    prior_start_s: Array
    """When the step before that one began, or the request's send when that came later:
    on an engine that sends a first token a step after its prompt's step (llama.cpp's
    server), the prefill ran from here to ``step_start_s``..."""
    prior_batch: Array
    """...beside this many requests decoding."""
    gap_batch: Array
    """For each gap: how many requests its step decoded..."""
    gap_clean: Array
    """...and whether that step held no other request's prefill, either way an engine
    may send a first token (and the gap is not 0: two tokens read together)."""
    alone: Array
    """Requests whose prefill step held no other request's prefill."""
    idle: Array
    """Requests that found the engine idle: nothing decoding and no step ending between
    their send and their first token, which alone ended their step, and no other
    request sent meanwhile (one sent during a prefill can share its last step: on
    llama.cpp's server with a sliding-window model, a prompt's last tokens take a step
    of their own, and a prompt sent meanwhile joins it and delays its first token by
    its whole prefill)."""

    @classmethod
    def of(cls, o: Observed) -> Timeline:
        first = o.start_s + o.ttft_s
        gap_end = o.gap_start_s + o.gap_s
        gap_batch = batch_sizes(first, o.last_token_s, o.gap_start_s + o.gap_s / 2)
        typical = float(np.median(o.gap_s[o.gap_s > 0])) if np.any(o.gap_s > 0) else np.inf
        ends = step_ends(np.concatenate([first[~np.isnan(first)], gap_end]), typical)
        # The step that ended with a request's first token began at the step end before
        # it, or at the request's send when that came later (the engine was idle).
        at = np.where(np.isnan(first), 0, np.searchsorted(ends, first, "right") - 1)
        previous = np.where(at >= 1, ends[np.maximum(at - 1, 0)], -np.inf)
        step_start = np.where(np.isnan(first), np.nan, np.maximum(o.start_s, previous))
        step_end = np.maximum(ends[np.maximum(at, 0)], step_start)
        step_batch = batch_sizes(first, o.last_token_s, (step_start + step_end) / 2)
        before = np.where(at >= 2, ends[np.maximum(at - 2, 0)], -np.inf)
        prior_start = np.where(np.isnan(first), np.nan, np.maximum(o.start_s, before))
        prior_start = np.minimum(prior_start, step_start)
        prior_batch = batch_sizes(first, o.last_token_s, (prior_start + step_start) / 2)
        # A gap is a decode alone when no prefill ran in its step either way an engine
        # may send a first token: with its prompt's step (a first token ends the gap) or
        # a step later (the gap ends where a step before a first token ended).
        late_prefill_end = step_start[~np.isnan(first) & (step_start > o.start_s)]
        clean = (
            (o.gap_s > 0)
            & ~with_prefill(o.gap_start_s, o.gap_s, first)
            & ~with_prefill(o.gap_start_s, o.gap_s, late_prefill_end)
        )
        # Another prefill shared the step when its first token came within half a step
        # of this one's (half the step, or of a typical gap when the step was longer).
        window = np.minimum(first - step_start, typical)
        alone = prefills_ending(first, window, first) <= 1
        sent = np.sort(o.start_s)
        meanwhile = np.searchsorted(sent, first, "left") - np.searchsorted(sent, o.start_s, "right")
        idle = alone & (step_batch == 0) & (step_start == o.start_s) & (meanwhile == 0)
        return cls(
            first_s=first,
            step_start_s=step_start,
            step_end_s=step_end,
            step_batch=step_batch,
            prior_start_s=prior_start,
            prior_batch=prior_batch,
            gap_batch=gap_batch,
            gap_clean=clean,
            alone=alone,
            idle=idle,
        )


STEP_SPLIT = 0.3
"""Token receptions more than this share of a typical gap apart belong to different
steps: a step's tokens reach the client over a few ms (one write per stream, read in
turn), the next step's a whole step later."""


def step_ends(receptions: Array, typical_gap_s: float) -> Array:
    """When each engine step ended, as the client saw it: the first of each run of
    token receptions no more than ``STEP_SPLIT`` of a typical gap apart.

    >>> step_ends(np.array([0.0, 0.001, 0.02, 0.0205, 0.04]), 0.02).tolist()
    [0.0, 0.02, 0.04]
    """
    times = np.sort(receptions)
    new = np.concatenate([[True], np.diff(times) > STEP_SPLIT * typical_gap_s])
    out: Array = times[new]
    return out


@dataclass(frozen=True)
class Residuals:
    """|predicted - measured| / measured over the requests, for TTFT and latency."""

    ttft_median: float
    ttft_p90: float
    ttft_requests: int
    latency_median: float
    latency_p90: float
    latency_requests: int
    """Streams whose every gap is exact (a stream past ``EXACT_GAPS`` has binned ones)."""


@dataclass(frozen=True)
class Calibration:
    """A fitted profile and its account of itself: what was fitted from what, what was
    kept from the base, the load it was fitted at and how well it explains its input."""

    profile: EngineProfile
    base: str
    fitted: dict[str, str]
    not_fitted: dict[str, str]
    files: tuple[str, ...]
    requests: int
    streamed: int
    failed: int
    rate_rps: float
    mean_concurrency: float
    batch_range: tuple[int, int]
    served_model: str | None
    residuals: Residuals
    window: WindowErrors
    """The fitted profile serving the window again (``calibration_window``)."""
    warnings: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The profile file: every ``EngineProfile`` field at the top (so
        ``tailreplay sim --profile FILE`` reads it), then ``fitted``, ``not_fitted`` and
        ``calibration``."""
        return {
            **asdict(self.profile),
            "fitted": self.fitted,
            "not_fitted": self.not_fitted,
            "calibration": {
                "files": list(self.files),
                "base": self.base,
                "requests": self.requests,
                "streamed": self.streamed,
                "failed": self.failed,
                "rate_rps": round(self.rate_rps, 3),
                "mean_concurrency": round(self.mean_concurrency, 2),
                "batch_sizes": list(self.batch_range),
                "served_model": self.served_model,
                "residuals": {k: _rounded(v) for k, v in asdict(self.residuals).items()},
                "window": {k: _rounded(v) for k, v in asdict(self.window).items()},
                "warnings": list(self.warnings),
            },
        }


def _rounded(value: float | int) -> float | int | None:
    """A residual for JSON: rounded, and None where there was nothing to measure."""
    if isinstance(value, float):
        return round(value, 4) if np.isfinite(value) else None
    return value


def calibrate(
    paths: Sequence[str | os.PathLike[str]], base: EngineProfile, *, skip_corrupt: bool = False
) -> Calibration:
    """Fit ``base``'s time and capacity parameters to the results in ``paths``, e.g.
    ``calibrate(["results.msgpack"], profile("fast")).profile.decode_base_ms``."""
    return calibrate_observed(read_results(paths, skip_corrupt=skip_corrupt), base)


def calibrate_observed(o: Observed, base: EngineProfile) -> Calibration:
    """``calibrate`` on results already read. Raises ``UnusableResults`` (one line:
    what cannot be fitted and why) when they cannot give the time model."""
    streamed = int(o.streamed.sum())
    if not streamed:
        raise UnusableResults(
            f"{', '.join(o.files)}: no streamed answers ({len(o.start_s):,} answered): "
            "without first-token times and inter-token gaps neither prefill nor decode "
            "cost can be fitted; replay with streaming requests"
        )
    if streamed < MIN_REQUESTS:
        raise UnusableResults(
            f"{', '.join(o.files)}: {streamed} streamed answers; a calibration needs at "
            f"least {MIN_REQUESTS} to fit prefill and decode costs"
        )
    if not np.any(o.ttft_s[o.streamed] > 0):
        raise UnusableResults(
            f"{', '.join(o.files)}: every streamed answer's first token came at 0 ms: "
            "without first-token times the prefill cost cannot be fitted"
        )
    t = Timeline.of(o)
    decode = _decode_fit(o, t)
    limits = fit_limits(o, t.gap_batch, _queued(o, t, decode), base)
    window, prefill, fitted_profile, first_token = _first_token_way(o, t, decode, limits, base)
    residuals = explain(o, t, fitted_profile)
    return Calibration(
        profile=fitted_profile,
        base=base.name,
        fitted=_fitted_notes(prefill, decode) | {"first_token_late": first_token} | limits.fitted,
        not_fitted=limits.not_fitted,
        files=o.files,
        requests=o.requests,
        streamed=streamed,
        failed=o.failed,
        rate_rps=_rate(o),
        mean_concurrency=_concurrency(o),
        batch_range=decode.sizes,
        served_model=limits.served_model,
        residuals=residuals,
        window=window,
        warnings=(*limits.warnings, *_clamped(prefill, decode), *_missed(window)),
    )


def _first_token_way(
    o: Observed, t: Timeline, decode: _Decode, limits: Limits, base: EngineProfile
) -> tuple[WindowErrors, LineFit, EngineProfile, str]:
    """The first token with its prompt's step, or a step later: the prefill fitted each
    way, each profile serving the window again, and the one whose TTFT comes closer
    kept; with its errors, its prefill fit, the profile and why it was chosen."""
    ways = []
    for late in (False, True):
        prefill = _prefill_fit(o, t, decode, base.max_batched_tokens, late=late)
        way = replace(_profile(base, prefill, decode, limits, o), first_token_late=late)
        ways.append((served_again(o, way), prefill, way))
    # A way whose twin served none of the requests (NaN) is never the closer one.
    window, prefill, chosen = min(
        ways, key=lambda w: np.nan_to_num(w[0].ttft_request_ms, nan=np.inf)
    )
    on_time, late_way = (
        f"{w.ttft_request_ms:,.0f} ms (P50 {w.ttft_p50:+.1%}, P99 {w.ttft_p99:+.1%})"
        for w, _, _ in ways
    )
    why = (
        f"the way whose twin served the window's requests' TTFT closer, as a mean "
        f"|twin - measured|: {on_time} with its prompt's step, {late_way} a step later"
    )
    return window, prefill, chosen, why


WINDOW_MISS = 0.25
"""A profile whose twin serves its own window's TTFT or latency P50 further off than
this is said not to explain its input."""


def _missed(w: WindowErrors) -> list[str]:
    """The profile serving its own window far from what it measured: its twin will not
    predict other loads better, and the input is one the time model does not read
    (e.g. a burst that filled the engine before anything decoded, answers not
    streamed beside streamed ones, a prefix cache the answers did not report)."""
    figures = {"TTFT P50": w.ttft_p50, "latency P50": w.latency_p50}
    off = {k: v for k, v in figures.items() if not abs(v) <= WINDOW_MISS}
    if not off:
        return []
    said = ", ".join(
        f"{k} {v:+.0%}" if np.isfinite(v) else f"{k} not served" for k, v in off.items()
    )
    return [
        f"the fitted profile serves its own input again at {said}: it does not explain "
        "the input, and a twin of it is not to be trusted at other loads"
    ]


def _clamped(prefill: LineFit, decode: _Decode) -> list[str]:
    """A line fitted below 0 (a cost that shrinks as the work grows): the profile holds
    0 there, which no engine is, and says so."""
    return [
        f"{name} fitted at {value:.4g} ms, below 0 (the results do not show the cost "
        f"growing with the work): 0 in the profile"
        for name, value in (
            ("prefill_base_ms", prefill.base),
            ("prefill_per_token_ms", prefill.slope),
            ("decode_base_ms", decode.base),
            ("decode_per_seq_ms", decode.slope),
        )
        if value < 0
    ]


@dataclass(frozen=True)
class _Decode:
    """The decode fit: the line through the medians, and the medians themselves at
    each batch size from 1 (the step times as measured)."""

    line: LineFit
    steps: tuple[float, ...]

    @property
    def base(self) -> float:
        return self.line.base

    @property
    def slope(self) -> float:
        return self.line.slope

    @property
    def sizes(self) -> tuple[int, int]:
        """The batch sizes the line was fitted over."""
        return int(self.line.x_range[0]), int(self.line.x_range[1])

    def ms(self, batch: Array) -> Array:
        """The step time at each of ``batch`` (sizes of 1 and more)."""
        return step_times(self.line.base, self.line.slope, self.steps, batch)


def _decode_fit(o: Observed, t: Timeline) -> _Decode:
    batch, gap_ms = t.gap_batch[t.gap_clean], o.gap_s[t.gap_clean] * 1e3
    fit = fit_decode(batch, gap_ms)
    if fit is None:
        raise UnusableResults(
            f"{', '.join(o.files)}: the inter-token gaps saw fewer than three batch "
            "sizes with enough gaps each: the decode cost against the batch cannot be fitted "
            "(replay at a load that varies the number of requests decoding at once)"
        )
    return _Decode(fit, tuple(decode_steps(batch, gap_ms)))


def _prefill_fit(
    o: Observed, t: Timeline, decode: _Decode, chunk: int, *, late: bool = False
) -> LineFit:
    """The prefill fit on each streamed request's prefill step less its decode: from the
    requests that found the engine idle when there are enough of them, else from those
    whose prefill was alone in its step when there are enough, else from all.

    Beside a running batch, the prefill's step is the one its first token ended where
    the first token comes with its prefill's step (vLLM, SGLang, the simulator). With
    ``late``, it is the step before that one: llama.cpp's server sends the first token
    a step later, so its prefill time is the two steps from ``prior_start_s`` less
    their decodes (the second decoded the request itself too). The step the first
    token ended is a decode there: read as the prefill, it puts the fit at a tenth of
    the cost, or at 0 ms a token (on replays of the e2e twin's window at llama.cpp's
    server). An idle engine's request is read alike either way: its TTFT is its
    prefill and, ``late``, one decode."""
    if late:
        decode_ms = np.where(t.prior_batch > 0, decode.ms(t.prior_batch), 0.0)
        decode_ms = decode_ms + decode.ms(t.step_batch + 1)
        prefill_ms = (t.step_end_s - t.prior_start_s) * 1e3 - decode_ms
    else:
        decode_ms = np.where(t.step_batch > 0, decode.ms(t.step_batch), 0.0)
        prefill_ms = (t.step_end_s - t.step_start_s) * 1e3 - decode_ms
    tokens = o.uncached_tokens
    idle = t.idle & o.streamed
    alone = t.alone & o.streamed
    # An idle engine's prefill shares its step with nothing: its time is its cost, and
    # the median line, not the lower envelope, is the typical one.
    quantile = PREFILL_QUANTILE
    if idle.sum() >= MIN_IDLE_PREFILLS:
        use, quantile = idle, 0.5
    elif alone.sum() >= MIN_CLEAN_PREFILLS:
        use = alone
    else:
        use = o.streamed
    fit = fit_prefill(tokens[use], prefill_ms[use], chunk, quantile)
    if fit is None:
        raise UnusableResults(
            f"{', '.join(o.files)}: the streamed requests' prompts do not vary in size "
            "(or fewer than 10 have any): the prefill cost per token cannot be fitted"
        )
    return fit


def _queued(o: Observed, t: Timeline, decode: _Decode) -> Array:
    """Streamed requests that waited in the queue: their prefill step began more than
    two steps after they were sent (one admitted at once waits out one step at most)."""
    step_ms = decode.ms(t.step_batch)
    queued: Array = o.streamed & ((t.step_start_s - o.start_s) * 1e3 > 2 * step_ms)
    return queued


def _profile(
    base: EngineProfile, prefill: LineFit, decode: _Decode, limits: Limits, o: Observed
) -> EngineProfile:
    p = base.with_overrides(
        name="calibrated",
        prefill_base_ms=round(max(prefill.base, 0.0), 4),
        prefill_per_token_ms=round(max(prefill.slope, 0.0), 6),
        decode_base_ms=round(max(decode.base, 0.0), 4),
        decode_per_seq_ms=round(max(decode.slope, 0.0), 6),
        decode_steps_ms=tuple(round(ms, 4) for ms in decode.steps),
        **limits.overrides,
    )
    longest = int((o.input_tokens + o.output_tokens).max())
    # Sized to serve what it was fitted on (context and KV cache), as replay sizes the
    # built-in target; a limit the results gave stays as fitted.
    return fit_context(p, longest, keep=frozenset(limits.overrides))


def _fitted_notes(prefill: LineFit, decode: _Decode) -> dict[str, str]:
    lo, hi = (int(x) for x in prefill.x_range)
    blo, bhi = decode.sizes
    on_prefill = (
        f"lower envelope (20% quantile regression) of {prefill.points:,} requests' "
        f"prefill step less its decode, against {lo:,}..{hi:,} uncached input tokens"
    )
    on_decode = (
        f"least squares through the median clean inter-token gap at each batch size "
        f"{blo}..{bhi} ({decode.line.points:,} gaps)"
    )
    on_steps = (
        f"the median clean inter-token gap at each batch size from 1 to "
        f"{len(decode.steps)} (each seen by at least {DECODE_MIN_GAPS} gaps)"
    )
    return {
        "prefill_base_ms": on_prefill + " (intercept: weakly identified, about ±5 ms)",
        "prefill_per_token_ms": on_prefill,
        "decode_base_ms": on_decode,
        "decode_per_seq_ms": on_decode,
        "decode_steps_ms": on_steps,
    }


def _rate(o: Observed) -> float:
    span = float(o.start_s.max() - o.start_s.min())
    return (len(o.start_s) - 1) / span if span > 0 else 0.0


def _concurrency(o: Observed) -> float:
    """Requests in flight on average, from their first send to the last answer's end
    (Little's law: the summed latencies over that span)."""
    span = float(o.end_s.max() - o.start_s.min())
    return float((o.end_s - o.start_s).sum()) / span if span > 0 else 0.0


def explain(o: Observed, t: Timeline, p: EngineProfile) -> Residuals:
    """Each streamed request's TTFT and latency as ``p`` predicts them from the steps it
    met, against the measured ones.

    Predicted TTFT: the wait until its prefill step began (as measured), plus that
    step: its prefill, the prefill tokens of the requests whose first token came with
    its own, and the decode of the batch. Predicted latency: that TTFT plus, for each
    gap, the decode of its step's batch and the prefill of the requests whose first
    tokens ended it (a step pays the prefill base once).
    """
    streamed = o.streamed
    first = t.first_s
    tokens = o.uncached_tokens
    steps = prefill_steps(tokens, p.max_batched_tokens)
    # A step pays the prefill base once, however many prompts it prefills.
    own = np.where(streamed, p.prefill_base_ms * steps + p.prefill_per_token_ms * tokens, 0.0)
    extra = np.where(
        streamed, p.prefill_base_ms * (steps - 1) + p.prefill_per_token_ms * tokens, 0.0
    )
    window = first - t.step_start_s
    shared = _prefills_ms_ending(first, window, first, extra) - extra
    step_decode = np.where(t.step_batch > 0, _decode_ms(p, t.step_batch), 0.0)
    wait_ms = (t.step_start_s - o.start_s) * 1e3
    ttft_pred = wait_ms + own + shared + step_decode
    gap_end = o.gap_start_s + o.gap_s
    ending = _prefills_ms_ending(gap_end, o.gap_s, first, extra)
    any_prefill = prefills_ending(gap_end, o.gap_s, first) > 0
    gap_pred = _decode_ms(p, t.gap_batch) + ending + p.prefill_base_ms * any_prefill
    decode_pred = np.bincount(o.gap_request, weights=gap_pred, minlength=len(o.start_s))
    latency_pred = ttft_pred + decode_pred
    ttft_err = _relative(ttft_pred[streamed], o.ttft_s[streamed] * 1e3)
    whole = o.complete
    latency_err = _relative(latency_pred[whole], (o.end_s - o.start_s)[whole] * 1e3)
    return Residuals(
        ttft_median=_pct(ttft_err, 50),
        ttft_p90=_pct(ttft_err, 90),
        ttft_requests=len(ttft_err),
        latency_median=_pct(latency_err, 50),
        latency_p90=_pct(latency_err, 90),
        latency_requests=len(latency_err),
    )


def _decode_ms(p: EngineProfile, batch: Array) -> Array:
    return step_times(p.decode_base_ms, p.decode_per_seq_ms, p.decode_steps_ms, batch)


def _prefills_ms_ending(end: Array, window: Array, first: Array, prefill_ms: Array) -> Array:
    """The summed prefill cost of the requests whose first token came within ``window / 2``
    of each ``end`` (the prefills that shared that step)."""
    ok = ~np.isnan(first)
    order = np.argsort(first[ok])
    firsts, costs = first[ok][order], prefill_ms[ok][order]
    summed = np.concatenate([[0.0], np.cumsum(costs)])
    lo = np.searchsorted(firsts, end - window / 2, "right")
    hi = np.searchsorted(firsts, end + window / 2, "left")
    out: Array = summed[hi] - summed[lo]
    return out


def _relative(predicted: Array, measured: Array) -> Array:
    ok = measured > 0
    out: Array = np.abs(predicted[ok] - measured[ok]) / measured[ok]
    return out


def _pct(values: Array, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summary_lines(c: Calibration) -> list[str]:
    """What ``tailreplay sim calibrate`` prints: the fit, what it kept, how well it
    explains its own input."""
    p, r, w = c.profile, c.residuals, c.window
    lo, hi = c.batch_range
    kept = ", ".join(c.not_fitted)
    model = c.served_model if c.served_model is not None else f"none named ({p.served_model})"
    return [
        f"fitted on {c.streamed:,} streamed answers of {c.requests:,} requests "
        f"({c.failed:,} failed) at {c.rate_rps:.2f} req/s, mean concurrency "
        f"{c.mean_concurrency:.1f}, batch sizes {lo}..{hi}; served model {model}",
        f"prefill {p.prefill_base_ms:.2f} ms + {p.prefill_per_token_ms:.5f} ms/token; "
        f"decode {p.decode_base_ms:.2f} ms + {p.decode_per_seq_ms:.4f} ms/sequence",
        f"limits: max_num_seqs {p.max_num_seqs}"
        f"{'' if 'max_num_seqs' in c.fitted else ' (not fitted: at least the most seen)'}, "
        f"prefix caching {'on' if p.prefix_caching else 'off'}, block size {p.block_size}",
        f"not fitted (kept from {c.base}): {kept}",
        f"explains its input: |predicted - measured| / measured TTFT median "
        f"{r.ttft_median:.1%}, P90 {r.ttft_p90:.1%} ({r.ttft_requests:,} requests); "
        f"latency median {r.latency_median:.1%}, P90 {r.latency_p90:.1%} "
        f"({r.latency_requests:,} requests)",
        f"serves its input again (offline, first token "
        f"{'a step after its prompt' if p.first_token_late else 'with its prompt'}'s step): "
        f"TTFT P50 {w.ttft_p50:+.1%}, P99 {w.ttft_p99:+.1%}; "
        f"latency P50 {w.latency_p50:+.1%}, P99 {w.latency_p99:+.1%}",
    ]
