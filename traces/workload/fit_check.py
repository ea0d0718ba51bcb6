"""The checks a workload model passes before it is used: a hand-edited or damaged
model file gets one line naming what is wrong, never a crash deep in synthesis or
an archive nobody can read."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tailreplay.errors import InputError
from tailreplay.traces.workload.hmm import MAX_STATES
from tailreplay.traces.workload.lengths import MAX_COMPONENTS

if TYPE_CHECKING:
    from tailreplay.traces.workload.fit import Workload

__all__ = ["check_workload"]

_MAX_TOKENS = 2**31


def check_workload(w: Workload, where: str) -> None:
    """Raise InputError with the first thing wrong with ``w`` (read from ``where``)."""
    problem = _problem(w)
    if problem is not None:
        raise InputError(f"{where}: malformed workload model ({problem})")


def _problem(w: Workload) -> str | None:
    a, n = w.arrivals, w.lengths
    checks: list[tuple[bool, str]] = [
        (_positive(w.rate_rps), "rate_rps must be a positive number"),
        (a.kind in ("renewal", "mmpp"), f"arrivals.kind {a.kind!r} is not renewal or mmpp"),
        (_positive(a.rate_rps), "arrivals.rate_rps must be a positive number"),
        (a.kind != "renewal" or a.renewal is not None, "a renewal model needs arrivals.renewal"),
        (a.clock.tick_s is None or _positive(a.clock.tick_s), "clock.tick_s must be positive"),
        (_share(a.clock.tie_share), "clock.tie_share must be within 0..1"),
        (
            _profile_ok(a.profile_bin_s, a.rate_profile),
            "the rate curve must have a positive bin and positive factors",
        ),
        (_share(w.stream_share), "stream_share must be within 0..1"),
        (_shares(w.models, allow_empty=True), "models must map names to shares summing to 1"),
        (_shares(w.paths, allow_empty=False), "paths must map paths to shares summing to 1"),
        (
            isinstance(w.warnings, list) and all(isinstance(x, str) for x in w.warnings),
            "warnings must be a list of strings",
        ),
    ]
    checks += [
        (_dist_ok(d), "arrivals.renewal must be a weibull or gamma of positive shape and scale")
        for d in (a.renewal,)
        if d is not None
    ]
    checks.append(
        (
            _mmpp_ok(a.mmpp),
            "arrivals.mmpp must have positive bin_s, 1 to "
            f"{MAX_STATES} non-negative rates and rows of probabilities",
        )
    )
    checks.append(
        (
            _lengths_ok(n),
            f"lengths must have 1 to {MAX_COMPONENTS} components of "
            "weights summing to 1, finite means, positive-definite 2x2 covariances "
            f"and 1 <= min <= max < {_MAX_TOKENS}",
        )
    )
    return next((why for ok, why in checks if not ok), None)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _positive(x: Any) -> bool:
    return _number(x) and x > 0


def _share(x: Any) -> bool:
    return _number(x) and 0 <= x <= 1


def _shares(d: Any, *, allow_empty: bool) -> bool:
    if not isinstance(d, dict) or (not d and not allow_empty):
        return False
    values = list(d.values())
    ok = all(isinstance(k, str) for k in d) and all(_share(v) for v in values)
    return ok and (not values or abs(sum(values) - 1) < 1e-6)


def _profile_ok(bin_s: Any, profile: Any) -> bool:
    if profile is None:
        return True
    return (
        _positive(bin_s)
        and isinstance(profile, list)
        and 0 < len(profile) <= 10_000_000
        and all(_positive(f) for f in profile)
    )


def _dist_ok(d: Any) -> bool:
    return d.family in ("weibull", "gamma") and _positive(d.shape) and _positive(d.scale)


def _rows_ok(rows: Any, k: int) -> bool:
    try:
        a = np.array(rows, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return (
        a.shape == (k, k)
        and bool(np.isfinite(a).all())
        and bool((a >= 0).all())
        and bool(np.allclose(a.sum(1), 1, atol=1e-6))
    )


def _mmpp_ok(m: Any) -> bool:
    rates = m.rates
    if not (isinstance(rates, list) and 1 <= len(rates) <= MAX_STATES):
        return False
    k = len(rates)
    return (
        _positive(m.bin_s)
        and all(_number(r) and r >= 0 for r in rates)
        and any(r > 0 for r in rates)
        and _rows_ok(m.transitions, k)
        and isinstance(m.initial, list)
        and len(m.initial) == k
    )


def _lengths_ok(n: Any) -> bool:
    w = n.weights
    if not (isinstance(w, list) and 1 <= len(w) <= MAX_COMPONENTS):
        return False
    k = len(w)
    try:
        mu = np.array(n.means, dtype=np.float64)
        cov = np.array(n.covariances, dtype=np.float64)
        weights = np.array(w, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    if mu.shape != (k, 2) or cov.shape != (k, 2, 2) or not np.isfinite(mu).all():
        return False
    if not (np.isfinite(weights).all() and (weights >= 0).all() and abs(weights.sum() - 1) < 1e-6):
        return False
    det = cov[:, 0, 0] * cov[:, 1, 1] - cov[:, 0, 1] * cov[:, 1, 0]
    if not (np.isfinite(cov).all() and (cov[:, 0, 0] > 0).all() and (det > 0).all()):
        return False
    bounds = (n.min_input, n.max_input, n.min_output, n.max_output)
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
        return False
    lo_in, hi_in, lo_out, hi_out = (int(b) for b in bounds)
    return 1 <= lo_in <= hi_in < _MAX_TOKENS and 1 <= lo_out <= hi_out < _MAX_TOKENS
