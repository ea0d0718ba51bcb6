"""What every part of tailreplay reads of an answer: usage, problems, error messages.

The proxy, the replayer, the importers, the exporters and the simulator all read
LLM API traffic; what differs by dialect (usage names, finish reasons, a stream's
closing event) the dialect says (``tailreplay.dialects``), the rest lives here, once.

Usage is found by a byte search, not a JSON parse of the whole response: the
usage map is small and comes last, and the bytes kept may be only the stream's
tail. A whole body decoded anyway (to tell it is JSON) gives its usage from the
decoded map where the byte search would find that one alone (``read_answer``).
"""

from __future__ import annotations

import json
import re
import zlib
from typing import TYPE_CHECKING, Any

import orjson

from tailreplay.dialects import Dialect, dialect_for
from tailreplay.dialects.usage import Usage

if TYPE_CHECKING:
    from tailreplay.http.sse import StreamTimeline

__all__ = [
    "ResponseTap",
    "call_name",
    "calls_that_generate_nothing",
    "decode_fields",
    "error_message",
    "generates_nothing",
    "parse_usage",
    "read_answer",
    "response_problem",
]

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


_USAGE_KEY = re.compile(r'"usage"\s*:\s*\{')
_DECODER = json.JSONDecoder()


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


def parse_usage(
    kept: bytes, content_encoding: str | None = None, dialect: Dialect | None = None
) -> Usage:
    """Usage and finish reason from the kept response bytes (the last of each wins).

    ``kept`` may be a whole JSON body, an SSE stream or only its tail: every
    ``"usage": {...}`` object in it is decoded as JSON, whatever it nests, and read
    under ``dialect``'s names (OpenAI's when None).

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
    raw = bytes(kept)
    text = raw.decode("utf-8", "replace")
    usage = Usage()
    fold = dialect.fold_usage if dialect is not None else _fold_openai
    for m in _USAGE_KEY.finditer(text):
        try:
            fields, _ = _DECODER.raw_decode(text, m.end() - 1)
        except (ValueError, RecursionError):
            continue  # cut off by the kept window, not JSON, or nested past the stack
        if isinstance(fields, dict):
            fold(usage, fields)
    usage.finish_reason = _finish(raw, dialect)
    return usage


def _fold_openai(usage: Usage, fields: dict[str, Any]) -> None:
    usage.update(fields)


_FINISH = re.compile(rb'"finish_reason"\s*:\s*"([a-z_]+)"')


def _finish(raw: bytes, dialect: Dialect | None) -> str | None:
    if dialect is not None:
        return dialect.finish_reason(raw)
    found = _FINISH.findall(raw)
    return found[-1].decode() if found else None


def read_answer(
    path: str | None, status: int, tap: ResponseTap, timeline: StreamTimeline | None
) -> tuple[str | None, Usage]:
    """``response_problem`` and ``parse_usage`` of an answer's kept bytes, a whole JSON
    body on a known route decoded once for both: the replayer reads every answer,
    thousands a second.

    The decoded body's own ``usage`` stands for the byte search's only when the search
    would find that map and no other: the bytes hold ``"usage"`` once and no ``\\u``
    escape (a key can be spelt only literally, then). Anything else goes to the byte
    search, so both ways give the same counts.
    """
    kept = bytes(tap.kept)
    dialect = dialect_for(path)
    if timeline is not None or tap.truncated or status >= 400 or dialect is None:
        return response_problem(path, status, tap, timeline), parse_usage(kept, None, dialect)
    try:
        doc = decode_fields(kept)
    except (ValueError, RecursionError):  # not JSON, or nested past the stack
        return "bad_response", parse_usage(kept, None, dialect)
    fields = doc.get("usage") if isinstance(doc, dict) else None
    if not isinstance(fields, dict) or kept.count(b'"usage"') != 1 or b"\\u" in kept:
        return None, parse_usage(kept, None, dialect)
    usage = Usage()
    dialect.fold_usage(usage, fields)
    usage.finish_reason = dialect.finish_reason(kept)
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
    events are counted by a ``tailreplay.http.sse.StreamTimeline``). Other bodies: the
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


def response_problem(
    path: str | None, status: int, tap: ResponseTap, timeline: StreamTimeline | None
) -> str | None:
    """Why a successful answer on a known route is not what its API promises, or None.

    A body that is not JSON (an HTML page, a proxy's error text), a stream with
    events that are not JSON, or a stream that ends without its dialect's closing
    event (``[DONE]``, ``response.completed``, ``message_stop``: cut short) is a
    ``bad_response``, whatever its status said.
    """
    dialect = dialect_for(path)
    if status >= 400 or dialect is None:
        return None
    if timeline is not None:
        if timeline.malformed:
            return "bad_response"
        return "bad_response" if dialect.stream_ends and not timeline.done else None
    if tap.truncated:
        return None  # over 1 MiB: not judged
    try:
        json.loads(bytes(tap.kept))
    except (ValueError, RecursionError):  # not JSON, or nested past the stack
        return "bad_response"
    return None
