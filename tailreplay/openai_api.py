"""What every part of tailreplay knows of the OpenAI API: paths, route labels, usage, chat text.

The proxy, the replayer, the importers, the exporters and the simulator all read
OpenAI-compatible traffic; the facts they share live here, once.

Usage is found by a byte search, not a JSON parse of the whole response: the
usage map is small and comes last, and the bytes kept may be only the stream's
tail. A whole body decoded anyway (to tell it is JSON) gives its usage from the
decoded map where the byte search would find that one alone (``read_answer``).
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from tailreplay.sse import StreamTimeline

__all__ = [
    "COUNT_LIMIT",
    "OPENAI_PATHS",
    "ROUTES",
    "ResponseTap",
    "Usage",
    "call_name",
    "calls_that_generate_nothing",
    "chat_parts",
    "chat_text",
    "decode_fields",
    "error_message",
    "generates_nothing",
    "operation_name",
    "parse_usage",
    "read_answer",
    "response_problem",
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


_TOKENIZER_ROUTES = ("/tokenize", "/detokenize")


def generates_nothing(method: Any, path: Any) -> bool:
    """Whether a call with this method and path generates nothing: an SDK's
    ``GET /v1/models``, a health check, a tokenizer route. Its latency is a lookup's,
    not a generation's, so every view keeps it out of the latency figures.

    Any method but POST (a generation sends a body), or a POST to a tokenizer route.
    A record without a method (an imported trace) is a generation.
    """
    if type(method) is not str:
        return False
    if method.upper() != "POST":
        return True
    return type(path) is str and path.split("?", 1)[0].rstrip("/").endswith(_TOKENIZER_ROUTES)


def call_name(method: str, path: Any) -> str:
    """How a call that generates nothing is named wherever it is counted apart:
    ``GET /v1/models`` (the method in capitals, the path without its query)."""
    return f"{method.upper()} {path.split('?', 1)[0] if type(path) is str else '-'}"


def calls_that_generate_nothing(n: int) -> str:
    """``1 call that generates nothing``, ``5 calls that generate nothing``."""
    return f"{n:,} call that generates nothing" if n == 1 else f"{n:,} calls that generate nothing"


def operation_name(path: str | None) -> str:
    """GenAI's ``gen_ai.operation.name`` for a request path (``chat`` when unknown)."""
    if path is None:
        return "chat"
    return _OPERATIONS.get(path.split("?", 1)[0].rstrip("/"), "chat")


@dataclass
class Usage:
    """What the server reported of a response's tokens (None: not reported)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    """All generated tokens, reasoning included."""
    cached_tokens: int | None = None
    """Prompt tokens served from the prefix cache."""
    reasoning_tokens: int | None = None
    """Generated tokens spent thinking before the answer (inside completion_tokens)."""
    finish_reason: str | None = None


_USAGE_KEY = re.compile(r'"usage"\s*:\s*\{')
_FINISH = re.compile(r'"finish_reason"\s*:\s*"([a-z_]+)"')
_DECODER = json.JSONDecoder()
# Each count under the names servers give it: OpenAI's chat and completions, its
# Responses API and Anthropic's (input/output), vLLM, SGLang, TGI and llama.cpp
# (OpenAI's names), nested as OpenAI nests the details.
_PROMPT = (("prompt_tokens",), ("input_tokens",))
_COMPLETION = (("completion_tokens",), ("output_tokens",))
_CACHED = (
    ("prompt_tokens_details", "cached_tokens"),
    ("input_tokens_details", "cached_tokens"),
    ("cache_read_input_tokens",),
)
_REASONING = (
    ("completion_tokens_details", "reasoning_tokens"),
    ("output_tokens_details", "reasoning_tokens"),
)


def decode_fields(data: bytes) -> Any:
    """A JSON body decoded for the fields a record reads (strings, bools and counts):
    by orjson (0.3 µs for a chat request, against json's 1.7 µs), and what orjson
    refuses (NaN, a BOM, UTF-16, lone surrogates, nesting past 1,024) by json, as
    before. orjson gives an integer past 64 bits as a float; every count read from
    it must be an int below ``COUNT_LIMIT``, so such a value is no count either way.
    Not for bodies written back out: there the float would change what was sent.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def parse_usage(kept: bytes, content_encoding: str | None = None) -> Usage:
    """Usage and finish reason from the kept response bytes (the last of each wins).

    ``kept`` may be a whole JSON body, an SSE stream or only its tail: every
    ``"usage": {...}`` object in it is decoded as JSON, whatever it nests.

    >>> parse_usage(b'{"usage": {"prompt_tokens": 9, "completion_tokens": 2}}').prompt_tokens
    9
    """
    if content_encoding in ("gzip", "deflate"):
        try:
            # 47: a gzip or zlib header. At most what the tap keeps of a plain body: a
            # small bomb must not inflate to gigabytes here.
            kept = zlib.decompressobj(47).decompress(bytes(kept), _WHOLE_BYTES)
        except zlib.error:
            return Usage()
    text = bytes(kept).decode("utf-8", "replace")
    usage = Usage()
    for m in _USAGE_KEY.finditer(text):
        try:
            fields, _ = _DECODER.raw_decode(text, m.end() - 1)
        except (ValueError, RecursionError):
            continue  # cut off by the kept window, not JSON, or nested past the stack
        _update(usage, fields)
    finishes = _FINISH.findall(text)
    if finishes:
        usage.finish_reason = finishes[-1]
    return usage


COUNT_LIMIT = 1 << 32
"""Token counts an archive holds are below this (``traces/archive/validate.py``'s _TOKENS)."""
_COUNTS = (
    ("prompt_tokens", _PROMPT),
    ("completion_tokens", _COMPLETION),
    ("cached_tokens", _CACHED),
    ("reasoning_tokens", _REASONING),
)
"""Each count's paths in a usage object: a key, or a key and one under it."""


def _update(usage: Usage, fields: dict[str, Any]) -> None:
    """Set what one usage object reports; counts it does not report stay as they were."""
    for name, paths in _COUNTS:
        for path in paths:
            value = fields.get(path[0])
            if len(path) == 2:
                value = value.get(path[1]) if isinstance(value, dict) else None
            # Not a bool (JSON's numbers decode to int exactly), and a count an archive
            # holds (0 <= v < 2^32, docs/archive-format.md): anything else is no count.
            if type(value) is int and 0 <= value < COUNT_LIMIT:
                setattr(usage, name, value)
                break


def read_answer(
    path: str | None, status: int, tap: ResponseTap, timeline: StreamTimeline | None
) -> tuple[str | None, Usage]:
    """``response_problem`` and ``parse_usage`` of an answer's kept bytes, a whole JSON
    body on an OpenAI route decoded once for both: the replayer reads every answer,
    thousands a second.

    The decoded body's own ``usage`` stands for the byte search's only when the search
    would find that map and no other: the bytes hold ``"usage"`` once and no ``\\u``
    escape (a key can be spelt only literally, then). Anything else goes to the byte
    search, so both ways give the same counts.
    """
    kept = bytes(tap.kept)
    bare = (path or "").split("?", 1)[0]
    if timeline is not None or tap.truncated or status >= 400 or bare not in OPENAI_PATHS:
        return response_problem(path, status, tap, timeline), parse_usage(kept)
    try:
        doc = decode_fields(kept)
    except (ValueError, RecursionError):  # not JSON, or nested past the stack
        return "bad_response", parse_usage(kept)
    fields = doc.get("usage") if isinstance(doc, dict) else None
    if not isinstance(fields, dict) or kept.count(b'"usage"') != 1 or b"\\u" in kept:
        return None, parse_usage(kept)
    usage = Usage()
    _update(usage, fields)
    finishes = _FINISH.findall(kept.decode("utf-8", "replace"))
    if finishes:
        usage.finish_reason = finishes[-1]
    return None, usage


_MESSAGE_KEYS = ("message", "msg", "detail", "error")
_MESSAGE = re.compile(r'"(?:message|msg|detail)"\s*:\s*"((?:[^"\\]|\\.)*)')


def error_message(body: bytes | str) -> str:
    """The message of an error answer, as the server wrote it.

    OpenAI's ``{"error": {"message": ...}}`` (vLLM, SGLang, llama.cpp answer the
    same), also ``{"error": "..."}``, ``{"message": ...}`` and FastAPI's
    ``{"detail": ...}``; a body cut short keeps its first ``"message"`` string;
    anything else is the body as text.

    >>> error_message(b'{"error": {"message": "too long", "type": "invalid_request_error"}}')
    'too long'
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        found = _message_in(json.loads(text), depth=3)
    except (ValueError, RecursionError):  # not JSON, or nested past the stack
        m = _MESSAGE.search(text)  # a body cut short, perhaps inside the message itself
        found = _unescape(m.group(1)) if m is not None else None
    return found if found is not None else text.strip()


def _unescape(literal: str) -> str | None:
    """A JSON string's content, decoded (as it is when an escape was cut in two)."""
    try:
        text = str(json.loads(f'"{literal}"'))
    except (ValueError, RecursionError):  # not JSON, or nested past the stack
        text = literal
    return text.strip() or None


def _message_in(doc: Any, depth: int) -> str | None:
    if isinstance(doc, str):
        return doc.strip() or None
    if depth <= 0:
        return None
    if isinstance(doc, list):  # FastAPI's validation errors: [{"msg": ...}, ...]
        return next((m for d in doc if (m := _message_in(d, depth - 1)) is not None), None)
    if isinstance(doc, dict):
        for key in _MESSAGE_KEYS:
            if key in doc and (m := _message_in(doc[key], depth - 1)) is not None:
                return m
    return None


def chat_text(messages: list[Any]) -> str:
    """The text of chat ``messages`` for counting: each as ``<role>\\n<content>\\n``.

    A stand-in for a chat template (which adds a few tokens per message the same
    way); the simulator counts prompts with it and the proxy estimates with it.
    Content given as parts keeps its text parts.
    """
    return "".join(chat_parts(messages))


def chat_parts(messages: list[Any]) -> list[str]:
    """``chat_text`` message by message (a conversation's earlier messages come
    again, unchanged, in each of its requests)."""
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
    return parts


_TAIL_BYTES = 16 << 10
_WHOLE_BYTES = 1 << 20


def _restore_tap(stream: bool, kept: bytes, truncated: bool) -> ResponseTap:
    tap = ResponseTap.__new__(ResponseTap)  # every field set here: no __init__ call
    tap.stream = stream
    tap.kept = bytearray(kept)
    tap.truncated = truncated
    return tap


class ResponseTap:
    """Keeps what the recorder needs of a response, bounded in memory.

    Streams: the last 16 KiB (usage and finish reason come last; their token
    events are counted by a ``tailreplay.sse.StreamTimeline``). Other bodies: the
    first 1 MiB. The proxy keeps one per exchange, the replayer one per request.
    """

    __slots__ = ("kept", "stream", "truncated")

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.kept = bytearray()
        self.truncated = False

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with the proxy's exchange (see Exchange.__reduce__): a flat tuple.
        return (_restore_tap, (self.stream, bytes(self.kept), self.truncated))

    def feed(self, chunk: bytes) -> None:
        if self.stream:
            self.kept += chunk
            if len(self.kept) > 2 * _TAIL_BYTES:
                del self.kept[: len(self.kept) - _TAIL_BYTES]
        else:
            room = _WHOLE_BYTES - len(self.kept)
            self.kept += chunk[: max(room, 0)]
            self.truncated = self.truncated or len(chunk) > room


_DONE_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
"""Streams that end with ``data: [DONE]`` (the Responses API ends with an event instead)."""


def response_problem(
    path: str | None, status: int, tap: ResponseTap, timeline: StreamTimeline | None
) -> str | None:
    """Why a successful answer on an OpenAI route is not what the API promises, or None.

    A body that is not JSON (an HTML page, a proxy's error text), a stream with
    events that are not JSON, or a chat/completions stream that ends without
    ``[DONE]`` (cut short) is a ``bad_response``, whatever its status said.
    """
    bare = (path or "").split("?", 1)[0]
    if status >= 400 or bare not in OPENAI_PATHS:
        return None
    if timeline is not None:
        if timeline.malformed:
            return "bad_response"
        return "bad_response" if bare in _DONE_PATHS and not timeline.done else None
    if tap.truncated:
        return None  # over 1 MiB: not judged
    try:
        json.loads(bytes(tap.kept))
    except (ValueError, RecursionError):  # not JSON, or nested past the stack
        return "bad_response"
    return None
