"""Archive format constants: the header, its version, upgrades and file naming.

docs/archive-format.md is the normative description; this module is its code.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tailreplay.traces.archive.capture_header import KEY as CAPTURE_KEY
from tailreplay.version import __version__

__all__ = [
    "CHECKED_SINCE",
    "FORMAT",
    "UPGRADES",
    "VERSION",
    "make_header",
    "records_change",
    "rotated_name",
]

FORMAT = "tailreplay"
VERSION = 2
"""The archive format version: bumped only when an old reader would misread new files."""

CHECKED_SINCE = 2
"""The first version whose files carry checksums (``traces/archive/checksums.py``)."""

# Upgrade functions keyed by the version they upgrade *from*; each turns one record
# map of version v into version v + 1 (mitmproxy's io/compat.py pattern), or is None
# when records did not change (version 2 added checksums around the same records).
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]] | None] = {1: None}


def records_change(version: int) -> bool:
    """Whether records of ``version`` need an upgrade function to read as current ones."""
    return any(UPGRADES.get(v) is not None for v in range(version, VERSION))


# Limits for unpacking, so a hostile or damaged file cannot make a reader allocate
# without bound: a length prefix over these is rejected before any allocation, and a
# record over MAX_RECORD_BYTES or holding more than MAX_RECORD_OBJECTS map and array
# entries (each at most 64 bytes in memory beyond its encoded bytes) is damage.
MAX_STR_LEN = 1 << 20  # paths, header values, model names
MAX_BIN_LEN = 64 << 20  # request bodies (the proxy's --max-body default is 10 MiB)
MAX_ARRAY_LEN = 1 << 20  # chunk_gaps_us: one per streamed token
MAX_MAP_LEN = 256
MAX_RECORD_BYTES = 80 << 20
MAX_RECORD_OBJECTS = 1 << 21

DEFAULT_READ_BUDGET = 256 << 20
"""Bytes of records a reader holds back to re-order a file (TAILREPLAY_READ_BUDGET)."""


def make_header(
    source: str,
    *,
    upstream: str | None = None,
    capture: dict[str, Any] | None = None,
    ordered: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The header map written first in every archive file.

    ``ordered`` promises that records follow in non-decreasing ``start_ns`` order
    (true for importers, merge and slice output; false for the proxy and the
    replayer, which write each record when its exchange completes).
    """
    header: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "created_ns": time.time_ns(),
        "source": source,
        "host": socket.gethostname(),
        "tool_version": __version__,
    }
    if upstream is not None:
        header["upstream"] = upstream
    if capture is not None:
        header[CAPTURE_KEY] = capture
    if ordered:
        header["ordered"] = True
    if extra:
        header.update(extra)
    return header


def rotated_name(prefix: str, start_ns: int, seq: int, *, compress: bool) -> str:
    """``<prefix>-<UTC start>-<host>-<pid>-<seq>.msgpack[.zst]`` (docs/archive-format.md)."""
    stamp = datetime.fromtimestamp(start_ns / 1e9, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    host = socket.gethostname().replace("-", "_").replace("/", "_") or "host"
    suffix = ".msgpack.zst" if compress else ".msgpack"
    return f"{prefix}-{stamp}-{host}-{os.getpid()}-{seq:04d}{suffix}"
