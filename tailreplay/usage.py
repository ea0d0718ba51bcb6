"""Token usage in an OpenAI-style response body or SSE stream.

Shared by the proxy (what it records) and the replayer (what the target reported).
A byte search, not a JSON parse of the whole response: the usage map is small and
comes last, and the bytes kept may be only the stream's tail.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass

__all__ = ["Usage", "parse_usage"]


@dataclass
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


_USAGE = re.compile(rb'"usage"\s*:\s*(\{[^{}]*\})')
_FINISH = re.compile(rb'"finish_reason"\s*:\s*"([a-z_]+)"')


def parse_usage(kept: bytes, content_encoding: str | None = None) -> Usage:
    """Usage and finish reason from the kept response bytes (last ones win)."""
    if content_encoding in ("gzip", "deflate"):
        try:
            kept = zlib.decompressobj(47).decompress(bytes(kept))  # 47: gzip or zlib header
        except zlib.error:
            return Usage()
    usage = Usage()
    for m in _USAGE.finditer(kept):
        try:
            fields = json.loads(m.group(1))
        except ValueError:
            continue
        pt, ct = (
            fields.get("prompt_tokens", fields.get("input_tokens")),
            fields.get("completion_tokens", fields.get("output_tokens")),
        )
        if isinstance(pt, int):
            usage.prompt_tokens = pt
        if isinstance(ct, int):
            usage.completion_tokens = ct
    finishes = _FINISH.findall(kept)
    if finishes:
        usage.finish_reason = finishes[-1].decode()
    return usage
