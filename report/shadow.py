"""``report --shadow``: a shadowed capture read as two sides, production (the requests
that were copied) and the shadow (its answers to the copies), joined request for
request by the production span each copy names (``shadow_of``).

The shadow saw only the share of production's requests that was copied, so its
load was that share of production's: the headline says so before any figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tailreplay.report.model import Report, Shadow
from tailreplay.traces.archive.validate import capture_shadow

__all__ = ["shadow_of_capture", "shadow_words"]


def shadow_of_capture(headers: Sequence[Mapping[str, Any]]) -> Shadow:
    """The shadow target and share the capture's header names (the first file's that
    names one); None where none does."""
    for header in headers:
        shadow = capture_shadow(header)
        if shadow is not None:
            target, share = shadow.get("target"), shadow.get("share")
            return {
                "target": target if isinstance(target, str) else None,
                "share": float(share) if isinstance(share, int | float) else None,
            }
    return {"target": None, "share": None}


def shadow_words(report: Report) -> str:
    """The headline's first words: how many copies, and the load the shadow carried."""
    shadow = report.get("shadow")
    assert shadow is not None
    copies = report["overall"]["replayed"]["requests"]
    share = shadow["share"]
    load = (
        f"{share * 100:.4g}% of production's generating requests, so about that share of its load"
        if share is not None
        else "a share of production's generating requests"
    )
    target = f" at {shadow['target']}" if shadow["target"] else ""
    return f"shadow{target}: {copies:,} copied requests ({load}; every figure below is of these)"
