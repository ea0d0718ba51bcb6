"""The share a shadow saw, checked against the trace ids: ``report --shadow`` picks
production's requests as the proxy picked them (``tailreplay/sampling.py``: by the
``sample_point`` each record carries, the keyed hash of its trace id, or by the trace
id's first 8 bytes in records without one) and says when the copies in the files are
not those.

The proxy copies a POST to a route a dialect serves (``tailreplay.dialects``: the
routes whose body it holds) whose trace id falls in ``--shadow-share``; with ``--sample``, a copy is
kept only when its trace is sampled, so the requests that could have a copy are
those whose trace id falls in the sample's share too (an error or a slow request the
sample kept for itself has none). Of those: the ones picked without a copy were not
sent (the shadow was down or full); copies of ones not picked were made at another
share. Either way the share the shadow saw is that of the copies present.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailreplay.dialects import dialect_for
from tailreplay.sampling import in_share, share_threshold, unkeyed_point
from tailreplay.traces.archive.capture_header import CaptureHeader
from tailreplay.traces.archive.reader import ArchiveReader

__all__ = ["THROTTLED", "ShareCheck", "survey"]

THROTTLED = "shadow_throttled"  # the proxy's word for it (proxy/shadow.py)


@dataclass
class ShareCheck:
    share: float | None
    throttled: set[bytes] = field(default_factory=set)
    """The originals' keys of the copies marked ``shadow_throttled``."""
    eligible: set[bytes] = field(default_factory=set)
    """Production's requests that could have been copied (see the module's doc)."""
    picked: set[bytes] = field(default_factory=set)
    """Of those, the ones whose trace id falls in the shadow's share."""

    def findings(self, copied: set[bytes]) -> tuple[list[str], float | None]:
        """Notes on the copies ``copied`` (their originals' keys) against the share, and
        the share of the eligible requests they are when it is not the one asked."""
        notes = []
        missed = len(self.picked - copied)
        outside = len((copied & self.eligible) - self.picked)
        if missed:
            notes.append(
                f"{missed:,} of the {len(self.picked):,} requests the share picked were "
                "not copied (the shadow was down, or had --shadow-max-inflight copies in "
                "flight)"
            )
        if outside and self.share is not None:
            notes.append(
                f"{outside:,} copies are of requests outside the header's share "
                f"({self.share * 100:.4g}%): made at another share"
            )
        if not (missed or outside) or not self.eligible:
            return notes, None
        sent = len(copied & self.eligible) / len(self.eligible)
        notes.append(
            f"the shadow saw {sent * 100:.3g}% of production's generating requests "
            f"(of {len(self.eligible):,} it could have been sent)"
        )
        return notes, sent


def survey(paths: Sequence[Path], skip_corrupt: bool, share: float | None) -> ShareCheck:
    """One pass over every record: the throttled copies, and production's requests that
    could have been copied and were picked."""
    out = ShareCheck(share)
    reader = ArchiveReader(paths, skip_corrupt=skip_corrupt, shadows="keep")
    shadow = share_threshold(share) if share is not None else None
    sample = _sample_threshold(reader.headers)
    for m in reader.iter_maps():
        trace = m.get("trace_id")
        if type(trace) is not bytes:
            continue
        of = m.get("shadow_of")
        if type(of) is bytes:
            if m.get("error") == THROTTLED:
                out.throttled.add(trace + of)
            continue
        span = m.get("span_id")
        if type(span) is not bytes or not _copyable(m.get("method"), m.get("path")):
            continue
        point = m.get("sample_point")
        if type(point) is not int:
            point = unkeyed_point(trace)
        if sample is not None and not in_share(point, sample):
            continue  # kept by --sample for itself (an error, the tail): never copied
        out.eligible.add(trace + span)
        if shadow is not None and in_share(point, shadow):
            out.picked.add(trace + span)
    return out


def _copyable(method: Any, path: Any) -> bool:
    """A request the proxy copies when picked: a POST to a route a dialect serves."""
    return method == "POST" and type(path) is str and dialect_for(path) is not None


def _sample_threshold(headers: Sequence[Mapping[str, Any]]) -> int | None:
    """The share ``--sample`` kept by trace id, from the first header naming one under
    1; None when every trace was kept."""
    for header in headers:
        capture = CaptureHeader.read(header)
        sample = capture.sample if capture is not None else None
        if sample is not None and 0 < sample < 1:
            return share_threshold(float(sample))
    return None
