"""What every format reader shares: the report of an import's bad rows
(``ImportReport``), the stable ids a row's number gives, and the record a row of a
token-count trace becomes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from tailreplay.errors import InputError
from tailreplay.traces.archive.record import Record

__all__ = ["ImportReport", "chat_record", "stable_id"]


@dataclass
class ImportReport:
    path: str
    strict: bool = False
    malformed: list[tuple[int, str]] = field(default_factory=list)

    invalid: list[tuple[int, str]] = field(default_factory=list)
    """Records that parsed but hold a value no reader accepts: (record number, why)."""

    def bad(self, line: int, reason: str) -> None:
        self.malformed.append((line, reason))
        if self.strict:
            raise InputError(f"{self.path}:{line}: {reason}")

    def reject(self, n: int, reason: str) -> None:
        self.invalid.append((n, reason))
        if self.strict:
            raise InputError(f"{self.path}: record {n}: {reason}")


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
        path="/v1/chat/completions",
        stream=True,
        tokens_source="usage",
        **fields,
    )
