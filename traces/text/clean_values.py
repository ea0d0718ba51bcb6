"""What redaction has found clean, remembered (``traces/text/redact.py``)."""

from __future__ import annotations

from typing import Any

__all__ = ["REMEMBERED_LEN", "CleanValues"]


class CleanValues:
    """Header pairs and request targets already found to hold nothing to mask, for one
    set of ``extra`` header names: a capture's requests repeat them (``Host``,
    ``Content-Type``, ``User-Agent``, a few paths), and a set lookup costs a tenth of
    the search. Only what is kept as it came is remembered, so no secret is held
    here; each set is emptied when it reaches ``capacity`` (values come from clients)."""

    __slots__ = ("capacity", "headers", "paths")

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self.headers: set[tuple[str, str]] = set()
        self.paths: set[str] = set()

    def remember(self, found: set[Any], value: Any) -> None:
        if len(found) >= self.capacity:
            found.clear()
        found.add(value)


REMEMBERED_LEN = 512
"""Longer values are judged every time rather than remembered."""
