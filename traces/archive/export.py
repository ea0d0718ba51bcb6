"""Exporting archives to formats other tools read: Mooncake JSONL and plain JSONL."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tailreplay.private import open_private
from tailreplay.traces.archive.reader import ArchiveReader

__all__ = ["export_jsonl", "export_mooncake"]


def export_mooncake(
    paths: Iterable[str | os.PathLike[str]], out: Path, *, skip_corrupt: bool = False
) -> int:
    """Mooncake JSONL (vLLM bench, AIPerf, GuideLLM): timestamps in ms from the first record."""
    n = 0
    first: int | None = None
    with open_private(out, encoding="utf-8") as f:
        for r in ArchiveReader(paths, skip_corrupt=skip_corrupt):
            first = r.start_ns if first is None else first
            obj: dict[str, Any] = {
                "timestamp": _ms(r.start_ns - first),
                "input_length": r.input_tokens or 0,
                "output_length": r.output_tokens or 0,
                "hash_ids": list(r.prefix_hashes or []),
            }
            if r.session is not None:
                obj["session_id"] = int(r.session) if r.session.isdigit() else r.session
            f.write(json.dumps(obj) + "\n")
            n += 1
    return n


def _ms(ns: int) -> int | float:
    ms = ns / 1e6
    return int(ms) if ms == int(ms) else ms


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):  # a key this version does not know may hold anything
        return {k.hex() if isinstance(k, bytes) else k: _jsonable(x) for k, x in v.items()}
    return v


def export_jsonl(
    paths: Iterable[str | os.PathLike[str]], out: Path, *, skip_corrupt: bool = False
) -> int:
    """One JSON object per record, ids (and bodies) in hex."""
    n = 0
    with open_private(out, encoding="utf-8") as f:
        for m in ArchiveReader(paths, skip_corrupt=skip_corrupt).iter_maps():
            f.write(json.dumps({k: _jsonable(v) for k, v in m.items()}) + "\n")
            n += 1
    return n
