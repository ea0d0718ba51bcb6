"""What a calibration says of the engine's limits and of the rest of its profile: each
field fitted where the results show it, else kept from the base profile with the
reason it could not be fitted.

- ``max_num_seqs``: the most requests seen decoding at once, when requests queued
  behind that batch (their prefill step began more than two steps after they were
  sent); without such a queue the most seen is only a lower bound.
- ``prefix_caching``, ``block_size``: answers that report cached tokens come from an
  engine with a prefix cache; a hit is whole blocks, so the block size is the common
  divisor of the hits.
- ``output_mean``, ``output_shape``: the Gamma distribution of the answers' lengths
  (by the moments), which the simulator draws from when a request does not force
  its length: the workload's, not the engine's.
- ``served_model``: the model the requests named.
- ``kv_tokens`` is not fitted: a full KV cache shows in per-request results only as a
  queue or a preemption, which a full batch explains as well.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from tailreplay.sim.calibration_data import Observed
from tailreplay.sim.calibration_fits import Array, batch_sizes, fit_block_size
from tailreplay.sim.profiles import EngineProfile

__all__ = ["MIN_QUEUED", "Limits", "fit_limits"]

MIN_QUEUED = 3
"""Requests that must have queued behind the largest batch seen to call it the limit."""

_FITTED_IN_CALIBRATE = frozenset(
    {
        "prefill_base_ms",
        "prefill_per_token_ms",
        "decode_base_ms",
        "decode_per_seq_ms",
        "decode_steps_ms",
        "first_token_late",
    }
)
"""Fields the time model fits (``calibrate.py``), not the limits here."""
_WHY_NOT: dict[str, str] = {
    "kv_tokens": "not identifiable from per-request results (a full KV cache shows only "
    "as a queue or a preemption, which a full batch explains as well)",
    "max_model_len": "the context is not measured; grown to the longest request seen "
    "plus 10% where that is more",
    "max_batched_tokens": "chunked prefill is not separated from the per-step cost",
    "queue_limit": "refusals (429) are not modelled from results",
    "reasoning_share": "reasoning is the workload's, not the engine's",
    "reasoning_tokens": "reasoning is the workload's, not the engine's",
    "spec_tokens": "speculative decoding is not modelled by the calibration",
}


@dataclass(frozen=True)
class Limits:
    overrides: dict[str, Any]
    fitted: dict[str, str]
    """Field -> what it was fitted from."""
    not_fitted: dict[str, str]
    """Field -> why it was kept from the base profile."""
    served_model: str | None
    warnings: tuple[str, ...]


def fit_limits(o: Observed, gap_batch: Array, queued: Array, base: EngineProfile) -> Limits:
    """The limits ``o`` shows, the rest kept from ``base``; ``gap_batch`` is the batch of
    each gap's step, ``queued`` the requests that waited in the queue."""
    overrides: dict[str, Any] = {}
    fitted: dict[str, str] = {}
    not_fitted: dict[str, str] = {}
    warnings: list[str] = list(o.warnings)
    for part in (
        _max_num_seqs(o, gap_batch, queued, base),
        _prefix_cache(o),
        _output_lengths(o),
        _served_model(o),
    ):
        for name, (value, why, is_fitted) in part.items():
            if value is not None:
                overrides[name] = value
            (fitted if is_fitted else not_fitted)[name] = why
    if o.gaps_dropped:
        warnings.append("more inter-token gaps than a calibration keeps: later streams' left out")
    if len(o.models) > 1:
        names = ", ".join(name for name, _ in o.models[:5])
        warnings.append(f"the requests named several models ({names}): fitted as one engine")
    for f in fields(EngineProfile):
        if f.name not in fitted and f.name not in _FITTED_IN_CALIBRATE and f.name != "name":
            not_fitted.setdefault(f.name, _WHY_NOT.get(f.name, "not measured"))
    served = overrides.get("served_model")
    return Limits(overrides, fitted, not_fitted, served, tuple(warnings))


_Part = dict[str, tuple[Any, str, bool]]
"""Field -> (value or None to keep the base's, why, fitted)."""


def _max_num_seqs(o: Observed, gap_batch: Array, queued: Array, base: EngineProfile) -> _Part:
    if not len(gap_batch):
        return {"max_num_seqs": (None, "no inter-token gaps", False)}
    most = int(gap_batch.max())
    first = o.start_s + o.ttft_s
    at_arrival = batch_sizes(first, o.last_token_s, o.start_s)
    behind = int(np.sum(queued & (at_arrival >= most - 1)))
    if behind >= MIN_QUEUED:
        why = f"the most requests seen decoding at once, with {behind} requests queued behind them"
        return {"max_num_seqs": (most, why, True)}
    why = (
        f"at most {most} requests were seen decoding at once, with no queue behind them: "
        f"the limit is at least that"
    )
    return {"max_num_seqs": (max(most, base.max_num_seqs), why, False)}


def _prefix_cache(o: Observed) -> _Part:
    cached = o.cached_tokens
    reported = int(np.sum(cached >= 0))
    if not reported:
        why = "no answer reported cached tokens (no prefix cache, or one that does not say)"
        return {"prefix_caching": (None, why, False), "block_size": (None, why, False)}
    hits = int(np.sum(cached > 0))
    on = f"{reported:,} answers reported cached tokens, {hits:,} of them hits"
    block = fit_block_size(cached)
    if block is None:
        why = f"fewer than 5 answers found prompt tokens in the prefix cache ({hits})"
        return {"prefix_caching": (True, on, True), "block_size": (None, why, False)}
    size = f"the greatest common divisor of the {hits:,} hits' cached tokens"
    return {"prefix_caching": (True, on, True), "block_size": (block, size, True)}


def _output_lengths(o: Observed) -> _Part:
    out = o.output_tokens[o.output_tokens > 0].astype(float)
    if len(out) < 2 or out.var() == 0:
        why = "the answers' lengths do not vary"
        return {"output_mean": (None, why, False), "output_shape": (None, why, False)}
    mean, shape = float(out.mean()), float(out.mean() ** 2 / out.var())
    why = f"moments of {len(out):,} answers' output tokens (the workload's lengths)"
    return {
        "output_mean": (round(mean, 2), why, True),
        "output_shape": (round(shape, 3), why, True),
    }


def _served_model(o: Observed) -> _Part:
    if not o.models:
        return {"served_model": (None, "no request named a model", False)}
    name, count = o.models[0]
    return {"served_model": (name, f"the model {count:,} requests named", True)}
