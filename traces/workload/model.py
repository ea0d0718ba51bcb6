"""The workload model ``traces fit`` writes and ``synth`` reads: its type
(``Workload``), its file (versioned JSON), its description, and the checks a model
read from a file passes before it is used: a hand-edited or damaged model file gets
one line naming what is wrong, never a crash deep in synthesis or an archive nobody
can read. Fitting and synthesis are in ``fit.py``."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tailreplay.errors import InputError
from tailreplay.traces.workload.arrivals import Arrivals
from tailreplay.traces.workload.clock import Clock
from tailreplay.traces.workload.hmm import MAX_STATES, Mmpp
from tailreplay.traces.workload.lengths import MAX_COMPONENTS, Lengths
from tailreplay.traces.workload.renewal import Dist

__all__ = ["MODEL_VERSION", "Workload", "check_workload"]

MODEL_VERSION = 2
_MAX_TOKENS = 2**31


@dataclass(frozen=True)
class Workload:
    records: int
    duration_s: float
    rate_rps: float
    arrivals: Arrivals
    lengths: Lengths
    stream_share: float
    models: dict[str, float]
    paths: dict[str, float]
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"format": "tailreplay-workload", "version": MODEL_VERSION, **asdict(self)}

    @classmethod
    def load(cls, path: Path) -> Workload:
        """The model in the JSON file ``path`` (what ``traces fit`` wrote)."""
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except (OSError, ValueError, RecursionError) as exc:
            raise InputError(f"{path}: not a workload model ({exc})") from None
        return cls.from_json(data if isinstance(data, dict) else {}, str(path))

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Workload:
        if data.get("format") != "tailreplay-workload":
            raise InputError(f"{where}: not a tailreplay workload model (see `traces fit`)")
        if data.get("version") != MODEL_VERSION:
            raise InputError(
                f"{where}: workload model version {data.get('version')!r} is not "
                f"{MODEL_VERSION}; fit it again with `traces fit`"
            )
        try:
            fields = {k: v for k, v in data.items() if k not in ("format", "version")}
            a = dict(fields["arrivals"])
            if not isinstance(a.get("clock"), dict) or not isinstance(a.get("mmpp"), dict):
                raise TypeError("arrivals.clock and arrivals.mmpp must be objects")
            a["clock"] = Clock(**a["clock"])
            a["mmpp"] = Mmpp(**a["mmpp"])
            for key in ("renewal", "renewal_other"):
                a[key] = Dist(**a[key]) if a.get(key) is not None else None
            fields["arrivals"] = Arrivals(**a)
            fields["lengths"] = Lengths(**fields["lengths"])
            workload = cls(**fields)
        except (TypeError, KeyError, ValueError, AttributeError, OverflowError) as exc:
            raise InputError(f"{where}: malformed workload model ({exc})") from None
        check_workload(workload, where)
        return workload

    def describe(self) -> list[str]:
        """The model in a few lines: what ``traces fit`` prints."""
        a, n = self.arrivals, self.lengths
        lines = [
            f"{self.records:,} records over {self.duration_s:,.1f} s, {self.rate_rps:,.2f} req/s; "
            + a.clock.describe(),
            "arrivals: " + _describe_arrivals(a),
            "burstiness (index of dispersion, recorded -> model): "
            + ", ".join(
                f"{w:g} s {_num(r)} -> {_num(m)}"
                for w, r, m in zip(
                    a.burstiness["windows_s"],
                    a.burstiness["recorded"],
                    a.burstiness["model"],
                    strict=True,
                )
            ),
            f"lengths: {n.components} joint components of (input, output) tokens; "
            f"KS input {n.ks_input:.3f}, output {n.ks_output:.3f}",
        ]
        if a.rate_profile is not None:
            lo, hi = min(a.rate_profile), max(a.rate_profile)
            lines.append(
                f"rate curve: {len(a.rate_profile)} bins of {a.profile_bin_s:g} s, "
                f"{lo:.2f}x to {hi:.2f}x the mean"
            )
        return lines


def _describe_arrivals(a: Arrivals) -> str:
    scores = ", ".join(f"{k} {v:.3f}" for k, v in sorted(a.scores.items()))
    if a.kind == "renewal" and a.renewal is not None:
        r = a.renewal
        head = f"renewal, {r.family} gaps of shape {r.shape:.3f} " + (
            f"(KS {r.ks:.3f})"
            if r.ks is not None
            else f"(fitted to counts on {a.clock.tick_s:g} s ticks)"
        )
    else:
        m = a.mmpp
        rates = ", ".join(f"{r:.2f}" for r in m.rates)
        head = f"Markov-modulated Poisson, {m.states} states of {rates} req/s in {m.bin_s:g} s bins"
    return f"{head}; burstiness error {scores}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


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
