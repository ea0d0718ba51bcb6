"""The checks a workload model read from a file passes before it is used.

A hand-edited or damaged model gets one phrase naming the field that is wrong and
what it must be (``arrivals.mmpp.bin_s must be a number of seconds in 1..1e6 (got
1e-308)``), never a crash, a hang or an archive nobody can read. The ranges hold
every model ``traces fit`` writes, with room to spare, and keep synthesis bounded:
no value can make a bin hold more arrivals than memory does, stop time advancing,
or overflow the arithmetic that turns rates into times. ``workload_model.py`` applies them.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tailreplay.traces.workload.hmm import MAX_STATES
from tailreplay.traces.workload.lengths import MAX_COMPONENTS
from tailreplay.traces.workload.prefixes import MAX_ROOT_BLOCKS, MAX_ROOTS, QUANTILES

if TYPE_CHECKING:
    from tailreplay.traces.workload.arrivals import Arrivals
    from tailreplay.traces.workload.drift import LengthDrift
    from tailreplay.traces.workload.hmm import Mmpp
    from tailreplay.traces.workload.lengths import Lengths
    from tailreplay.traces.workload.prefixes import PrefixReuse
    from tailreplay.traces.workload.renewal import Dist

__all__ = ["MAX_RATE", "MAX_TOKENS", "unencodable", "workload_problem"]

HISTORY_BOUND = 1e9
"""A fitted distance between requests that share a prefix (in requests) is at most this."""
MAX_RATE = 1_000_000.0
"""Requests per second a synthesis may ask for: beyond any replayable workload."""
MAX_TOKENS = 2**31
MAX_PROFILE_BINS = 100_000
_MAX_STATE_RATE = 1e9
_MIN_STATE_RATE = 1e-16
"""A state's rate above 0 at least: ``traces fit`` floors a state at 1e-9 a bin of at
most 1e6 s, and a rate nearer 0 overflows what turns rates into times."""
"""A state's rate (req/s) at most: a model's mean rate stays far from overflow."""
_SHAPE = (0.01, 1e6)
"""Gap shapes: below 0.01 a Weibull's mean overflows; 1e6 stands for a fixed gap."""
_SCALE = (1e-12, 1e12)
_MMPP_BIN_S = (1.0, 1e6)
"""``traces fit`` bins by at least 1 s (a 600-year recording gets 1e6 s bins)."""
_TICK_S = (1e-3, 1e6)
_PROFILE_BIN_S = (1e-3, 1e9)
_PROFILE_FACTOR = (1e-6, 1e6)
_LOG_TOKENS = 50.0
"""Means of log token counts within ±50 (e^21.5 is 2^31 tokens)..."""
_LOG_COVARIANCE = 1e4
"""...and covariances within ±1e4 (a standard deviation of 100 in log tokens)."""
_INT64 = (-(2**63), 2**63)


def unencodable(data: Any) -> str | None:
    """The first value of a model's JSON that an archive header cannot hold (the
    model is copied into the header of what ``synth`` writes): an integer past 64
    bits or a string with a lone surrogate. Walked without recursion: the JSON
    parser's nesting limit is the only one."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if type(value) is int and not _INT64[0] <= value < _INT64[1]:
            return f"{where or 'the model'} must be a number within ±2^63 (got {_shown(value)})"
        if type(value) is str and not _utf8(value):
            return f"{where or 'the model'} holds a string that is not UTF-8"
        if type(value) is dict:
            for k, v in value.items():
                if not _utf8(k):
                    return f"{where or 'the model'} has a key that is not UTF-8"
                stack.append((f"{where}.{k}" if where else k, v))
        elif type(value) is list:
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
    return None


def workload_problem(
    top: dict[str, Any],
    arrivals: Arrivals,
    lengths: Lengths,
    recent: Lengths | None = None,
    drift: LengthDrift | None = None,
    prefixes: PrefixReuse | None = None,
) -> str | None:
    """The first thing wrong with a model (one phrase naming the field), or None:
    ``top`` holds its top-level values by name (``records``, ``rate_rps``, ...);
    ``recent`` and ``drift`` are the second half's lengths and the halves' drift."""
    return (
        _top_problem(top)
        or _arrivals_problem(arrivals)
        or _mmpp_problem(arrivals.mmpp)
        or _lengths_problem(lengths, arrivals.mmpp.states)
        or (
            _lengths_problem(recent, arrivals.mmpp.states, "recent_lengths")
            if recent is not None
            else None
        )
        or (_drift_problem(drift) if drift is not None else None)
        or (_prefix_problem(prefixes) if prefixes is not None else None)
    )


def _shown(x: Any) -> str:
    if type(x) is int and abs(x) >= 10**15:
        return f"{x:.3g}"
    if type(x) in (int, float, bool) or (type(x) is str and len(x) <= 40):
        return repr(x)
    return "null" if x is None else type(x).__name__


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _number(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def _within(x: Any, lo: float, hi: float) -> bool:
    return _number(x) and lo <= x <= hi


_UNSHOWN = object()
"""A check's value not worth showing (a list of rates, a matrix)."""


def _first(checks: list[tuple[bool, str, Any]]) -> str | None:
    """The first failed check's phrase, with the value it got."""
    for ok, why, got in checks:
        if not ok:
            return why if got is _UNSHOWN else f"{why} (got {_shown(got)})"
    return None


def _top_problem(top: dict[str, Any]) -> str | None:
    records, duration, rate = top.get("records"), top.get("duration_s"), top.get("rate_rps")
    stream, models, paths = top.get("stream_share"), top.get("models"), top.get("paths")
    warnings = top.get("warnings")
    return _first(
        [
            (type(records) is int and records >= 0, "records must be an int >= 0", records),
            (_within(duration, 0, math.inf), "duration_s must be a number >= 0", duration),
            (_rate(rate), f"rate_rps must be a number above 0 and at most {MAX_RATE:,.0f}", rate),
            (_within(stream, 0, 1), "stream_share must be within 0..1", stream),
            (
                _shares(models, allow_empty=True),
                "models must map names to shares summing to 1",
                _UNSHOWN,
            ),
            (
                _shares(paths, allow_empty=False),
                "paths must map paths to shares summing to 1",
                _UNSHOWN,
            ),
            (
                isinstance(warnings, list) and all(isinstance(x, str) for x in warnings),
                "warnings must be a list of strings",
                warnings,
            ),
        ]
    )


def _rate(x: Any) -> bool:
    return _within(x, 0, MAX_RATE) and x > 0


def _shares(d: Any, *, allow_empty: bool) -> bool:
    if not isinstance(d, dict) or (not d and not allow_empty):
        return False
    values = list(d.values())
    ok = all(isinstance(k, str) for k in d) and all(_within(v, 0, 1) for v in values)
    return ok and (not values or abs(sum(values) - 1) < 1e-6)


def _arrivals_problem(a: Arrivals) -> str | None:
    tick = a.clock.tick_s
    return (
        _first(
            [
                (a.kind in ("renewal", "mmpp"), "arrivals.kind must be renewal or mmpp", a.kind),
                (
                    _rate(a.rate_rps),
                    f"arrivals.rate_rps must be a number above 0 and at most {MAX_RATE:,.0f}",
                    a.rate_rps,
                ),
                (
                    a.kind != "renewal" or a.renewal is not None,
                    "arrivals.renewal must be given for a renewal model",
                    a.renewal,
                ),
                (
                    tick is None or _within(tick, *_TICK_S),
                    "arrivals.clock.tick_s must be null or a number of seconds in 0.001..1e6",
                    tick,
                ),
                (
                    _within(a.clock.tie_share, 0, 1),
                    "arrivals.clock.tie_share must be within 0..1",
                    a.clock.tie_share,
                ),
                (
                    _numbers_map(a.scores),
                    "arrivals.scores must map names to numbers",
                    a.scores,
                ),
                (
                    _burstiness_ok(a.burstiness),
                    "arrivals.burstiness must map names to lists of numbers or nulls",
                    a.burstiness,
                ),
            ]
        )
        or _dist_problem(a.renewal, "arrivals.renewal")
        or _dist_problem(a.renewal_other, "arrivals.renewal_other")
        or _profile_problem(a.profile_bin_s, a.rate_profile)
    )


def _numbers_map(d: Any) -> bool:
    return isinstance(d, dict) and all(
        isinstance(k, str) and type(v) in (int, float) for k, v in d.items()
    )


def _burstiness_ok(d: Any) -> bool:
    return isinstance(d, dict) and all(
        isinstance(k, str)
        and isinstance(v, list)
        and all(x is None or type(x) in (int, float) for x in v)
        for k, v in d.items()
    )


def _dist_problem(d: Dist | None, where: str) -> str | None:
    if d is None:
        return None
    return _first(
        [
            (
                d.family in ("weibull", "gamma"),
                f"{where}.family must be weibull or gamma",
                d.family,
            ),
            (_within(d.shape, *_SHAPE), f"{where}.shape must be a number in 0.01..1e6", d.shape),
            (_within(d.scale, *_SCALE), f"{where}.scale must be a number in 1e-12..1e12", d.scale),
            (
                d.loglik is None or type(d.loglik) in (int, float),
                f"{where}.loglik must be null or a number",
                d.loglik,
            ),
            (d.ks is None or _within(d.ks, 0, 1), f"{where}.ks must be null or in 0..1", d.ks),
        ]
    )


def _profile_problem(bin_s: Any, profile: Any) -> str | None:
    if profile is None:
        return None
    factors_ok = (
        isinstance(profile, list)
        and 0 < len(profile) <= MAX_PROFILE_BINS
        and all(_within(f, *_PROFILE_FACTOR) for f in profile)
    )
    return _first(
        [
            (
                _within(bin_s, *_PROFILE_BIN_S),
                "arrivals.profile_bin_s must be a number of seconds in 0.001..1e9",
                bin_s,
            ),
            (
                factors_ok,
                f"arrivals.rate_profile must be a list of 1 to {MAX_PROFILE_BINS:,} "
                "factors in 1e-6..1e6",
                profile if not isinstance(profile, list) else _UNSHOWN,
            ),
        ]
    )


def _mmpp_problem(m: Mmpp) -> str | None:
    rates, k = m.rates, len(m.rates) if isinstance(m.rates, list) else 0
    rates_ok = (
        1 <= k <= MAX_STATES
        and all(_within(r, 0, _MAX_STATE_RATE) and (r == 0 or r >= _MIN_STATE_RATE) for r in rates)
        and any(r > 0 for r in rates)
    )
    return _first(
        [
            (
                _within(m.bin_s, *_MMPP_BIN_S),
                "arrivals.mmpp.bin_s must be a number of seconds in 1..1e6",
                m.bin_s,
            ),
            (
                rates_ok,
                f"arrivals.mmpp.rates must be 1 to {MAX_STATES} numbers in 0..1e9 req/s, "
                "each 0 or at least 1e-16, one above 0",
                _UNSHOWN,
            ),
            (
                _rows_ok(m.transitions, k),
                "arrivals.mmpp.transitions must be rows of probabilities summing to 1, one a state",
                _UNSHOWN,
            ),
            (
                isinstance(m.initial, list)
                and len(m.initial) == k
                and all(_within(p, 0, 1) for p in m.initial),
                "arrivals.mmpp.initial must be a share in 0..1 for each state",
                _UNSHOWN,
            ),
            (type(m.loglik) in (int, float), "arrivals.mmpp.loglik must be a number", m.loglik),
            (type(m.bic) in (int, float), "arrivals.mmpp.bic must be a number", m.bic),
        ]
    ) or _first(  # computed from the values checked above, so only once they hold
        [
            (
                _long_run_rate(m) > 0,
                "arrivals.mmpp must spend some of its time in a state of rate above 0",
                _UNSHOWN,
            ),
        ]
    )


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


def _long_run_rate(m: Mmpp) -> float:
    try:
        rate = m.mean_rate
    except (ValueError, np.linalg.LinAlgError):
        return math.nan
    return rate if math.isfinite(rate) else math.nan


def _prefix_problem(p: PrefixReuse) -> str | None:
    roots = p.root_shares if isinstance(p.root_shares, list) else None
    blocks = p.root_blocks if isinstance(p.root_blocks, list) else None
    return _first(
        [
            (
                type(p.requests) is int and p.requests >= 0,
                "prefix_reuse.requests must be an int >= 0",
                p.requests,
            ),
            (
                roots is not None
                and blocks is not None
                and len(roots) == len(blocks) <= MAX_ROOTS
                and all(_within(x, 0, 1) for x in roots)
                and sum(roots) <= 1 + 1e-6
                and all(type(b) is int and 1 <= b <= MAX_ROOT_BLOCKS for b in blocks),
                f"prefix_reuse.root_shares and root_blocks must be at most {MAX_ROOTS} "
                f"shares summing to at most 1, with as many lengths of 1..{MAX_ROOT_BLOCKS} "
                "blocks",
                _UNSHOWN,
            ),
            (
                _within(p.parent_share, 0, 1) and _within(p.seen_share, 0, 1),
                "prefix_reuse.parent_share and seen_share must be within 0..1",
                _UNSHOWN,
            ),
            (
                _points(p.distances, 1, HISTORY_BOUND) and _points(p.reuse, 0, 1),
                f"prefix_reuse.distances must be {QUANTILES} ascending numbers within "
                f"1..{HISTORY_BOUND:g} and reuse {QUANTILES} within 0..1 (or both empty)",
                _UNSHOWN,
            ),
        ]
    )


def _points(values: Any, low: float, high: float) -> bool:
    """Quantile points: none, or ``QUANTILES`` ascending numbers within low..high."""
    if not isinstance(values, list):
        return False
    if not values:
        return True
    ok = len(values) == QUANTILES and all(_within(v, low, high) for v in values)
    return ok and all(a <= b for a, b in itertools.pairwise(values))


def _drift_problem(d: LengthDrift) -> str | None:
    means = [*d.input_means, *d.output_means] if isinstance(d.input_means, list) else []
    pairs = isinstance(d.output_means, list) and len(means) == 4
    return _first(
        [
            (
                pairs and all(_within(x, 0, MAX_TOKENS) for x in means),
                f"length_drift's means must be two pairs of numbers within 0..{MAX_TOKENS}",
                _UNSHOWN,
            ),
            (
                _within(d.input_noise, 0, math.inf) and _within(d.output_noise, 0, math.inf),
                "length_drift's noise must be numbers >= 0",
                _UNSHOWN,
            ),
        ]
    )


def _lengths_problem(n: Lengths, states: int, name: str = "lengths") -> str | None:
    """``states``: the arrival model's MMPP states, one row of ``state_weights`` each."""
    w = n.weights
    k = len(w) if isinstance(w, list) else 0
    bounds = (n.min_input, n.max_input, n.min_output, n.max_output)
    ints = all(type(b) is int for b in bounds)
    return _first(
        [
            (
                1 <= k <= MAX_COMPONENTS and _shares_ok(w),
                f"{name}.weights must be 1 to {MAX_COMPONENTS} shares summing to 1",
                _UNSHOWN,
            ),
            (
                n.state_weights is None
                or (
                    isinstance(n.state_weights, list)
                    and len(n.state_weights) == states
                    and all(_shares_ok(row, k) for row in n.state_weights)
                ),
                f"{name}.state_weights must be null or, for each of the {states} arrival "
                f"states, {k} shares summing to 1",
                _UNSHOWN,
            ),
            (
                _array_ok(n.means, (k, 2), _LOG_TOKENS),
                f"{name}.means must be a pair of numbers within ±50 (log tokens) a component",
                _UNSHOWN,
            ),
            (
                _covariances_ok(n.covariances, k),
                f"{name}.covariances must be a positive-definite 2x2 matrix a component, "
                "within ±1e4",
                _UNSHOWN,
            ),
            (
                ints and 1 <= n.min_input <= n.max_input < MAX_TOKENS,
                f"{name}.min_input and max_input must be ints, 1 <= min <= max < {MAX_TOKENS}",
                _UNSHOWN,
            ),
            (
                ints and 1 <= n.min_output <= n.max_output < MAX_TOKENS,
                f"{name}.min_output and max_output must be ints, 1 <= min <= max < {MAX_TOKENS}",
                _UNSHOWN,
            ),
            (
                type(n.ks_input) in (int, float) and type(n.ks_output) in (int, float),
                f"{name}.ks_input and ks_output must be numbers",
                _UNSHOWN,
            ),
        ]
    )


def _shares_ok(values: Any, size: int | None = None) -> bool:
    return (
        isinstance(values, list)
        and (size is None or len(values) == size)
        and all(_within(x, 0, 1) for x in values)
        and abs(sum(values) - 1) < 1e-6
    )


def _array_ok(values: Any, shape: tuple[int, ...], bound: float) -> bool:
    try:
        a = np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return False
    return a.shape == shape and bool(np.isfinite(a).all()) and bool((np.abs(a) <= bound).all())


def _covariances_ok(values: Any, k: int) -> bool:
    if not _array_ok(values, (k, 2, 2), _LOG_COVARIANCE):
        return False
    cov = np.array(values, dtype=np.float64)
    det = cov[:, 0, 0] * cov[:, 1, 1] - cov[:, 0, 1] * cov[:, 1, 0]
    return bool((cov[:, 0, 0] > 0).all() and (det > 0).all())
