"""HAR 1.2 (browser and proxy captures): each entry becomes a record.

startedDateTime → start_ns, ``time`` → duration, ``timings.wait`` → ttfb, the
request's method, path and query, headers redacted exactly as the proxy redacts
them, the response status. HAR is one JSON document, so it is read whole (up to
``text_input.MAX_DOCUMENT_BYTES``; a capture of hours belongs in a proxy archive).
Entries are numbered from 1: a malformed one is skipped as ``entry N``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tailreplay.errors import InputError
from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport, Place, stable_id
from tailreplay.traces.importers.text_input import json_document
from tailreplay.traces.text.redact_targets import redact_headers, redact_path

__all__ = ["read"]

# Fingerprints need a key; an import has no deployment secret unless given one.
_KEY = os.environ.get("TAILREPLAY_FINGERPRINT_KEY", "").encode() or os.urandom(32)


_KINDS = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number"}


def _get(obj: dict[str, Any], key: str, kind: type, default: Any = None) -> Any:
    """``obj[key]`` when it is a ``kind``; ``default`` when absent or null (a required
    field has none); ValueError naming the field otherwise."""
    value = obj.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"no {key!r}")
        return default
    if type(value) is not kind:
        raise ValueError(f"{key!r} must be {_KINDS[kind]}, not {_KINDS.get(type(value), 'that')}")
    return value


def _number(obj: dict[str, Any], key: str) -> float | None:
    """A finite number, or None when absent (HAR writes -1 for "not known")."""
    value = obj.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError(f"{key!r} must be a finite number")
    return float(value)


def _ns(text: str) -> int:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    try:
        seconds = int(dt.timestamp())
    except OSError:  # a naive time the platform's local-time functions cannot place
        raise ValueError(f"startedDateTime {text[:40]!r} is out of range") from None
    return seconds * 10**9 + dt.microsecond * 1000


def _headers(request: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for h in _get(request, "headers", list, []):
        if type(h) is not dict or type(h.get("name")) is not str or type(h.get("value")) is not str:
            raise ValueError("every header must be an object with a string name and value")
        out.append((h["name"], h["value"]))
    return out


def _record(path: Path, n: int, entry: Any) -> Record:
    if type(entry) is not dict:
        raise ValueError(f"a JSON {type(entry).__name__}, not an object")
    request = _get(entry, "request", dict)
    response = _get(entry, "response", dict)
    url = urlsplit(_get(request, "url", str))
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    total_ms = _number(entry, "time") or 0.0
    wait_ms = _number(_get(entry, "timings", dict, {}), "wait")
    status = _number(response, "status")
    body = _number(response, "bodySize")
    return Record(
        start_ns=_ns(_get(entry, "startedDateTime", str)),
        trace_id=stable_id(path.name, n),
        span_id=stable_id(path.name, n, 8),
        method=_get(request, "method", str),
        path=redact_path(target, _KEY),
        status=int(status or 0),
        req_headers=redact_headers(_headers(request), frozenset(), _KEY) or None,
        duration_ns=round(total_ms * 1e6) if total_ms > 0 else None,
        ttfb_ns=round(wait_ms * 1e6) if wait_ms is not None and wait_ms >= 0 else None,
        bytes_out=int(body) if body is not None and body >= 0 else None,
    )


def _entries(path: Path) -> list[Any]:
    doc = json_document(path, "HAR")
    log = doc.get("log") if type(doc) is dict else None
    entries = log.get("entries") if type(log) is dict else None
    if type(entries) is not list:
        raise InputError(f"{path}: not a HAR file (no list at log.entries)")
    return entries


def read(path: Path, report: ImportReport) -> Iterator[tuple[Place, Record]]:
    for n, entry in enumerate(_entries(path), start=1):
        try:
            record = _record(path, n, entry)
        except (ValueError, OverflowError) as exc:
            report.bad(f"entry {n}", f"malformed entry: {exc}")
            continue
        yield f"entry {n}", record
