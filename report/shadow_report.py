"""``report --shadow``: a shadowed capture read as two sides, production (the requests
that were copied) and the shadow (its answers to the copies), joined request for
request by the production span each copy names (``shadow_of``).

The shadow saw only the share of production's requests that was copied, so its
load was that share of production's: the headline says so before any figure.

Only pairs are compared: a copy whose original is not in the files (a slice or
``--sample`` left it out) is left out, and so is a copy read slower than the shadow
sent it (``shadow_throttled``: its timing is the proxy's read budget, not the
shadow's), with its original. Classed by model (``--slo-by model``), a copy is of
its original's model: a ``--shadow-model-map`` renames what the shadow was asked,
not which of production's requests it answered.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tailreplay.errors import UsageError
from tailreplay.report.deltas import join
from tailreplay.report.model import Report, Shadow
from tailreplay.report.request_keys import KeyIndex, keys_of
from tailreplay.report.shadow_share import survey
from tailreplay.report.side import Side, load_side
from tailreplay.report.slo import Objective, check_judgeable
from tailreplay.traces.archive.capture_header import shadows_named
from tailreplay.traces.archive.validate import capture_shadow

__all__ = ["shadow_of_capture", "shadow_sides", "shadow_words"]


def shadow_of_capture(headers: Sequence[Mapping[str, Any]]) -> Shadow:
    """The shadow target and share the capture's header names (the first file's that
    names one); None where none does."""
    for header in headers:
        shadow = _named(header)
        if shadow is not None:
            return shadow
    return {"target": None, "share": None}


def _named(header: Mapping[str, Any]) -> Shadow | None:
    shadow = capture_shadow(header)
    if shadow is None:
        return None
    target, share = shadow.get("target"), shadow.get("share")
    return {
        "target": target if isinstance(target, str) else None,
        "share": float(share) if isinstance(share, int | float) else None,
    }


def shadow_sides(
    paths: Sequence[Path],
    skip_corrupt: bool,
    classes: list[str],
    objectives: Sequence[Objective],
) -> tuple[Side, Side, Shadow]:
    """Production's requests that were copied, and the copies, in pairs only; a
    relative objective production's records cannot judge is refused. What was left
    out, and copies the share asked for but the proxy did not send, are the copies'
    side's warnings (the report's, in every view)."""
    copies = load_side(paths, skip_corrupt=skip_corrupt, classes=classes, shadows="only")
    if not copies.n:
        raise UsageError(
            "--shadow: the capture holds no shadow copies (it was made without "
            "proxy --shadow, or the shadow answered nothing)"
        )
    _one_shadow(copies.headers)
    per_original = Counter(copies.keys())
    shadow = shadow_of_capture(copies.headers)
    check = survey(paths, skip_corrupt, shadow["share"])
    keys = set(per_original) - check.throttled
    production = load_side(
        paths, skip_corrupt=skip_corrupt, keep=KeyIndex(keys_of(keys)), classes=classes
    )
    if not production.n:
        raise UsageError(_no_pairs(copies.n, len(check.throttled), len(per_original)))
    check_judgeable(objectives, paths, skip_corrupt=skip_corrupt, baseline="production")
    notes: list[str] = []
    if check.throttled:
        notes.append(
            f"{len(check.throttled):,} copies were read slower than the shadow sent them "
            "(the proxy's read budget for copies): left out with their originals, their "
            "timing is the proxy's"
        )
    if orphans := len(keys - set(production.keys())):
        notes.append(
            f"{orphans:,} of {len(keys):,} copied requests have no production "
            "record in these files (a slice or --sample left them out): compared without them"
        )
    found, sent = check.findings(set(per_original))
    notes += found
    if sent is not None:
        shadow["sent"] = sent
    if again := sum(n - 1 for n in per_original.values()):
        notes.append(
            f"{again:,} copies repeat a request already copied (the same file given "
            "twice?): each is compared with its original"
        )
    if orphans or check.throttled:
        copies = load_side(
            paths,
            skip_corrupt=skip_corrupt,
            classes=classes,
            shadows="only",
            keep=production.key_index(),
        )
    if "model" in classes:
        copies = _of_originals_model(production, copies)
    copies.warnings.extend(notes)
    return production, copies, shadow


def _no_pairs(copies: int, throttled: int, originals: int) -> str:
    """Why no copy has a production record to be compared with."""
    if throttled == originals:
        return (
            f"--shadow: every one of the {copies:,} copies was read slower than the shadow "
            "sent it (shadow_throttled: its timing is the proxy's), so none can be compared"
        )
    return (
        f"--shadow: none of the {copies:,} copies has its production record in these "
        "files (a slice or --sample left them out)"
    )


def _one_shadow(headers: Sequence[Mapping[str, Any]]) -> None:
    """Refuse captures that copied to different shadows or at different shares, or
    beside captures without a shadow: one report of them would be of no one
    deployment at no one load."""
    if len(named := shadows_named(headers)) > 1:
        raise UsageError(
            f"--shadow: these captures copied to different shadows or shares "
            f"({', '.join(named)}): report each apart"
        )


def _of_originals_model(production: Side, copies: Side) -> Side:
    """``copies`` with each one's model its original's (the pairs are known)."""
    index = join(production, copies)
    model = np.where(index >= 0, production.model[np.maximum(index, 0)], -1)
    labels = {**copies.labels, "model": production.labels.get("model", [])}
    return dataclasses.replace(copies, model=model, labels=labels)


def shadow_words(report: Report) -> str:
    """The headline's first words: how many copies, and the load the shadow carried."""
    shadow = report.get("shadow")
    assert shadow is not None
    copies = report["overall"]["replayed"]["requests"]
    share, sent = shadow["share"], shadow.get("sent")
    seen = sent if sent is not None else share
    if seen is None:
        load = "a share of production's generating requests"
    else:
        load = f"{seen * 100:.3g}% of production's generating requests, so about that share"
        load += " of its load"
    if sent is not None and share is not None:
        load += f"; {share * 100:.4g}% asked"
    target = f" at {shadow['target']}" if shadow["target"] else ""
    return f"shadow{target}: {copies:,} copied requests ({load}; every figure below is of these)"
