"""What every part of tailreplay knows of the OpenAI API: paths, route labels, usage, chat text.

The proxy, the replayer, the importers, the exporters and the simulator all read
OpenAI-compatible traffic; the facts they share live here, once.

Usage is found by a byte search, not a JSON parse of the whole response: the
usage map is small and comes last, and the bytes kept may be only the stream's
tail.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OPENAI_PATHS",
    "ROUTES",
    "Usage",
    "chat_text",
    "operation_name",
    "parse_usage",
    "route_label",
]

OPENAI_PATHS = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}
)
"""Paths whose JSON bodies tailreplay reads (model, stream, max_tokens, usage)."""

ROUTES = (*sorted(OPENAI_PATHS), "/v1/models", "other")
"""Every value ``route_label`` can return: the bounded ``route`` label of metrics."""

_OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "text_completion",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "chat",
}


def route_label(path: str | None) -> str:
    """A bounded label for metrics: a known API path, or "other"."""
    bare = (path or "").split("?", 1)[0]
    return bare if bare in OPENAI_PATHS or bare == "/v1/models" else "other"


def operation_name(path: str | None) -> str:
    """GenAI's ``gen_ai.operation.name`` for a request path (``chat`` when unknown)."""
    if path is None:
        return "chat"
    return _OPERATIONS.get(path.split("?", 1)[0].rstrip("/"), "chat")


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


def chat_text(messages: list[Any]) -> str:
    """The text of chat ``messages`` for counting: each as ``<role>\\n<content>\\n``.

    A stand-in for a chat template (which adds a few tokens per message the same
    way); the simulator counts prompts with it and the proxy estimates with it.
    Content given as parts keeps its text parts.
    """
    parts = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(
                p.get("text", "")
                for p in content
                if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        parts.append(f"{m.get('role', '')}\n{content if isinstance(content, str) else ''}\n")
    return "".join(parts)
