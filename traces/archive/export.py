"""Exporting archives to formats other tools read: Mooncake JSONL and plain JSONL.

Both are written beside their path and renamed into place at the end, so a failure
leaves no export (or the previous one), never a part of one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailreplay.errors import ArchiveError
from tailreplay.openai_api import generates_nothing
from tailreplay.private import open_private, replaced_whole
from tailreplay.traces.archive.reader import ArchiveReader

__all__ = ["Exported", "export_jsonl", "export_mooncake"]


@dataclass
class Exported:
    written: int
    warnings: list[str] = field(default_factory=list)
    """The reader's (damage skipped, records out of order) and the export's own."""
    left_out: int = 0
    """Calls that generate nothing (``GET /v1/models``): not requests a benchmark sends."""


def export_mooncake(
    paths: Iterable[str | os.PathLike[str]], out: Path, *, skip_corrupt: bool = False
) -> Exported:
    """Mooncake JSONL (vLLM bench, AIPerf, GuideLLM): timestamps in ms from the first
    record. Only generations: a Mooncake line is a completion request to send, so calls
    that generate nothing (an SDK's model list) are left out and counted."""
    n = idle = 0
    first: int | None = None
    reader = ArchiveReader(paths, skip_corrupt=skip_corrupt)
    with replaced_whole(out) as part, open_private(part, encoding="utf-8") as f:
        for r in reader:
            if generates_nothing(r.method, r.path):
                idle += 1
                continue
            first = r.start_ns if first is None else first
            obj: dict[str, Any] = {
                "timestamp": _ms(r.start_ns - first),
                "input_length": r.input_tokens or 0,
                "output_length": r.output_tokens or 0,
                "hash_ids": list(r.prefix_hashes or []),
            }
            if r.session is not None:
                obj["session_id"] = _session(r.session)
            f.write(json.dumps(obj) + "\n")
            n += 1
    return Exported(n, reader.warnings(), idle)


def _session(text: str) -> int | str:
    """A session id of plain digits as the number Mooncake writes (up to 18 digits,
    within a 64-bit int), anything else as it is."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else text


def _ms(ns: int) -> int | float:
    ms = ns / 1e6
    return int(ms) if ms == int(ms) else ms


class _NotJson(ValueError):
    """A value no JSON object holds as it is."""


def _jsonable(v: Any) -> Any:
    """``v`` as JSON holds it: bytes in hex, a float JSON has no word for (NaN, an
    infinity: only in keys this version does not know) as null. A map key that is
    not a string raises ``_NotJson``: it is damage (docs/archive-format.md)."""
    if type(v) is bytes:
        return v.hex()
    if type(v) is float and not math.isfinite(v):
        return None
    if type(v) in (list, tuple):
        return [_jsonable(x) for x in v]
    if type(v) is dict:
        bad = next((k for k in v if type(k) is not str), None)
        if bad is not None:
            raise _NotJson(f"a map key that is not a string ({type(bad).__name__} {bad!r:.40})")
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def export_jsonl(
    paths: Iterable[str | os.PathLike[str]], out: Path, *, skip_corrupt: bool = False
) -> Exported:
    """One JSON object per record, ids (and bodies) in hex. A record holding a map key
    that is not a string is damage: an ``ArchiveError``, or with ``skip_corrupt``
    left out and counted."""
    n = skipped = 0
    reader = ArchiveReader(paths, skip_corrupt=skip_corrupt, shadows="keep")
    with replaced_whole(out) as part, open_private(part, encoding="utf-8") as f:
        for i, m in enumerate(reader.iter_maps(), start=1):
            try:
                line = json.dumps(_jsonable(m), allow_nan=False)
            except _NotJson as exc:
                if not skip_corrupt:
                    raise ArchiveError(
                        f"{_where(reader)}: record {i} holds {exc}; "
                        "use --skip-corrupt to leave such records out"
                    ) from None
                skipped += 1
                continue
            f.write(line + "\n")
            n += 1
    warnings = reader.warnings()
    if skipped:
        warnings.append(f"{skipped:,} records with a map key that is not a string were left out")
    return Exported(n, warnings)


def _where(reader: ArchiveReader) -> str:
    paths = reader.paths
    return str(paths[0]) if len(paths) == 1 else f"{len(paths)} archives (in time order)"
