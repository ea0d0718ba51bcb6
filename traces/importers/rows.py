"""What every format reader shares: the report of an import's bad rows
(``ImportReport``), the stable ids a row's number gives, and the record a row of a
token-count trace becomes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from tailreplay.dialects import DEFAULT_ROUTE
from tailreplay.errors import InputError
from tailreplay.traces.archive.record import Record

__all__ = ["ImportReport", "Place", "chat_record", "stable_id"]


Place = int | str
"""Where a row is in its file: a line number, or, in a format read whole, a name such
as ``entry 3``."""


@dataclass
class ImportReport:
    """An import's skipped rows, each with its place and why: ``malformed`` rows did
    not parse, ``invalid`` ones parsed into a record no reader would accept. With
    ``strict``, the first of either raises ``InputError`` instead."""

    path: str
    strict: bool = False
    malformed: list[tuple[Place, str]] = field(default_factory=list)
    invalid: list[tuple[Place, str]] = field(default_factory=list)

    def where(self, place: Place) -> str:
        """``SRC:12`` for a line, ``SRC: entry 3`` otherwise."""
        return f"{self.path}:{place}" if isinstance(place, int) else f"{self.path}: {place}"

    def bad(self, place: Place, reason: str) -> None:
        self.malformed.append((place, reason))
        if self.strict:
            raise InputError(f"{self.where(place)}: {reason}")

    def reject(self, place: Place, reason: str) -> None:
        self.invalid.append((place, reason))
        if self.strict:
            raise InputError(f"{self.where(place)}: {reason}")


def stable_id(source: str, n: int, size: int = 16) -> bytes:
    """A deterministic id for row ``n`` of a source: the same file imports the same ids."""
    return hashlib.blake2b(f"{source}:{n}".encode(), digest_size=size).digest()


def chat_record(source: str, n: int, start_ns: int, **fields: Any) -> Record:
    """A streamed chat-completions request from row ``n`` of a token-count trace."""
    return Record(
        start_ns=start_ns,
        trace_id=stable_id(source, n),
        span_id=stable_id(source, n, 8),
        method="POST",
        path=DEFAULT_ROUTE,
        stream=True,
        tokens_source="usage",
        **fields,
    )
