"""The workload model ``traces fit`` writes and ``synth`` reads: its type
(``Workload``), its file (versioned JSON, at most 64 MiB), its description, and the
checks a model read from a file passes before it is used (their ranges in
``model_checks.py``): a hand-edited or damaged model file gets one line naming the
field that is wrong, never a crash deep in synthesis or an archive nobody can read.
Fitting and synthesis are in ``fit.py``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tailreplay.errors import InputError, UsageError
from tailreplay.traces.workload.arrivals import Arrivals
from tailreplay.traces.workload.clock import Clock
from tailreplay.traces.workload.drift import LengthDrift
from tailreplay.traces.workload.hmm import Mmpp
from tailreplay.traces.workload.lengths import Lengths
from tailreplay.traces.workload.model_checks import unencodable, workload_problem
from tailreplay.traces.workload.prefixes import PrefixReuse
from tailreplay.traces.workload.renewal import Dist

__all__ = ["MODEL_VERSION", "Workload", "check_workload"]

MODEL_VERSION = 2
MAX_MODEL_BYTES = 64 << 20
"""A model file is read whole; ``traces fit`` writes well under a megabyte."""


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
    length_drift: LengthDrift | None = None
    """The lengths of the recording's first half against its second (None: too few)."""
    recent_lengths: Lengths | None = None
    """The lengths fitted to the second half of the span alone (``synth --lengths
    recent``); None where the halves hold too few requests to compare."""
    prefix_reuse: PrefixReuse | None = None
    """How the prompts share prefixes; None where the records carry no prefix hashes."""

    def lengths_for(self, which: str) -> Lengths:
        """The lengths to draw from: ``all`` of the span, or its ``recent`` half."""
        if which == "all":
            return self.lengths
        if which == "recent":
            if self.recent_lengths is None:
                raise InputError(
                    "the model has no lengths of its recent half (its recording is too "
                    "short to split); use --lengths all"
                )
            return self.recent_lengths
        raise UsageError(f"--lengths {which!r}: must be all or recent")

    def to_json(self) -> dict[str, Any]:
        return {"format": "tailreplay-workload", "version": MODEL_VERSION, **asdict(self)}

    @classmethod
    def load(cls, path: Path) -> Workload:
        """The model in the JSON file ``path`` (what ``traces fit`` wrote)."""
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_MODEL_BYTES + 1)
            if len(raw) > MAX_MODEL_BYTES:
                raise InputError(f"{path}: over {MAX_MODEL_BYTES >> 20} MiB: not a workload model")
            data = json.loads(raw)
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
        problem = unencodable(data)
        if problem is not None:
            raise InputError(f"{where}: malformed workload model ({problem})")
        try:
            values = {k: v for k, v in data.items() if k not in ("format", "version")}
            a = dict(values["arrivals"])
            if not isinstance(a.get("clock"), dict) or not isinstance(a.get("mmpp"), dict):
                raise TypeError("arrivals.clock and arrivals.mmpp must be objects")
            a["clock"] = Clock(**a["clock"])
            a["mmpp"] = Mmpp(**a["mmpp"])
            for key in ("renewal", "renewal_other"):
                a[key] = Dist(**a[key]) if a.get(key) is not None else None
            values["arrivals"] = Arrivals(**a)
            values["lengths"] = Lengths(**values["lengths"])
            parts = (
                ("recent_lengths", Lengths),
                ("length_drift", LengthDrift),
                ("prefix_reuse", PrefixReuse),
            )
            for key, kind in parts:
                if values.get(key) is not None:
                    values[key] = kind(**values[key])
            workload = cls(**values)
        except KeyError as exc:  # str(KeyError) is the key alone, quoted
            raise InputError(
                f"{where}: malformed workload model ({exc.args[0]} is missing: an object "
                "`traces fit` writes)"
            ) from None
        except (TypeError, ValueError, AttributeError, OverflowError) as exc:
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
        by_state = n.means_by_state() if a.kind == "mmpp" else []
        if by_state:
            lines.append(
                "lengths by arrival state (mean input / output tokens): "
                + "; ".join(
                    f"{rate:.2f} req/s {i:,.0f} / {o:,.0f}"
                    for rate, (i, o) in zip(a.mmpp.rates, by_state, strict=True)
                )
            )
        if self.length_drift is not None:
            lines.append(self.length_drift.describe())
        if self.prefix_reuse is not None:
            lines.append(self.prefix_reuse.describe())
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
    elif a.mmpp.states == 1 and a.rate_profile is None:
        head = (
            f"Poisson at {a.rate_rps:.2f} req/s (no candidate reproduced the "
            "recording's burstiness better, beyond the noise of its estimate)"
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
    parts = ("arrivals", "lengths", "recent_lengths", "length_drift", "prefix_reuse")
    top = {f.name: getattr(w, f.name) for f in fields(w) if f.name not in parts}
    problem = workload_problem(
        top, w.arrivals, w.lengths, w.recent_lengths, w.length_drift, w.prefix_reuse
    )
    if problem is not None:
        raise InputError(f"{where}: malformed workload model ({problem})")
