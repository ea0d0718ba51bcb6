"""W3C Trace Context (``traceparent``): parse, make, format.

Shared by the proxy (which continues an incoming trace) and the replayer (which
sends its own span's context to the target).
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass

__all__ = ["TraceContext", "new_span_id", "new_trace_id", "parse_traceparent"]

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$")


# Ids need to be unique, not secret: the OpenTelemetry SDK uses random.getrandbits
# too, and it is ~40x cheaper than os.urandom (a system call) on the request path.
_bits = random.SystemRandom().getrandbits(64)
_rng = random.Random(_bits ^ os.getpid())


def new_trace_id() -> bytes:
    while True:
        tid = _rng.getrandbits(128)
        if tid:  # all zeros is invalid
            return tid.to_bytes(16, "big")


def new_span_id() -> bytes:
    while True:
        sid = _rng.getrandbits(64)
        if sid:
            return sid.to_bytes(8, "big")


@dataclass(frozen=True, slots=True)
class TraceContext:
    trace_id: bytes
    span_id: bytes
    flags: int = 1

    def traceparent(self) -> str:
        return f"00-{self.trace_id.hex()}-{self.span_id.hex()}-{self.flags:02x}"

    def child(self) -> TraceContext:
        """A new span in the same trace."""
        return TraceContext(self.trace_id, new_span_id(), self.flags)


def parse_traceparent(value: str | None) -> TraceContext | None:
    """The context in a ``traceparent`` header, or None if absent or invalid.

    >>> parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").flags
    1
    """
    if not value:
        return None
    m = _TRACEPARENT.match(value.strip().lower())
    if not m:
        return None
    version, trace_hex, span_hex, flags = m.groups()
    if version == "ff" or (version == "00" and len(value.strip()) != 55):
        return None
    trace_id, span_id = bytes.fromhex(trace_hex), bytes.fromhex(span_hex)
    if not any(trace_id) or not any(span_id):
        return None
    return TraceContext(trace_id, span_id, int(flags, 16))
