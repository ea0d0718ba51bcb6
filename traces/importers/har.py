"""HAR 1.2 (browser and proxy captures): each entry becomes a record.

startedDateTime → start_ns, ``time`` → duration, ``timings.wait`` → ttfb, the
request's method, path and query, headers redacted exactly as the proxy redacts
them, the response status. HAR is one JSON document, so it is read whole (HAR
files are small; a capture of hours belongs in a proxy archive).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport, stable_id
from tailreplay.traces.text.redact import redact_headers, redact_path

__all__ = ["read"]

# Fingerprints need a key; an import has no deployment secret unless given one.
_KEY = os.environ.get("TAILREPLAY_FINGERPRINT_KEY", "").encode() or os.urandom(32)


def _ns(text: str) -> int:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(dt.timestamp()) * 10**9 + dt.microsecond * 1000


def read(path: Path, report: ImportReport) -> Iterator[Record]:
    try:
        with open(path, encoding="utf-8-sig") as f:
            doc = json.load(f)
        entries = doc["log"]["entries"]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        report.bad(1, f"not a HAR file: {exc}")
        return
    for n, entry in enumerate(entries, start=1):
        try:
            request, response = entry["request"], entry["response"]
            url = urlsplit(request["url"])
            target = url.path or "/"
            if url.query:
                target += "?" + url.query
            headers = [(h["name"], h["value"]) for h in request.get("headers", [])]
            total_ms = float(entry.get("time", 0))
            wait_ms = float((entry.get("timings") or {}).get("wait", -1))
            record = Record(
                start_ns=_ns(entry["startedDateTime"]),
                trace_id=stable_id(path.name, n),
                span_id=stable_id(path.name, n, 8),
                method=request["method"],
                path=redact_path(target, _KEY),
                status=int(response.get("status") or 0),
                req_headers=redact_headers(headers, frozenset(), _KEY) or None,
                duration_ns=round(total_ms * 1e6) if total_ms > 0 else None,
                ttfb_ns=round(wait_ms * 1e6) if wait_ms >= 0 else None,
                bytes_out=int(response.get("bodySize", -1))
                if int(response.get("bodySize", -1)) >= 0
                else None,
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            report.bad(n, f"malformed entry {n}: {exc}")
            continue
        yield record
