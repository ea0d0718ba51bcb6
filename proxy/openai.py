"""What the proxy understands of the OpenAI API: request fields, usage, SSE streams.

On the request path this module only does cheap byte work: it injects
``stream_options.include_usage`` into streaming requests that lack it (parsing
only bodies that mention "stream"), and relays SSE events — stripping what the
injection added, so the client sees exactly the stream it asked for. Request
fields, usage and token counts are read later, in the recorder process, from the
bytes kept (``request_info``, ``tailreplay.openai_api``'s ``ResponseTap`` and
``parse_usage``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tailreplay.dialects import dialect_for
from tailreplay.dialects.base import RequestFields
from tailreplay.http.sse import split_events
from tailreplay.openai_api import decode_fields

__all__ = [
    "RequestInfo",
    "SseRelay",
    "request_info",
    "with_usage_requested",
]

MAX_INSPECT_BYTES = 4 << 20
"""The largest body parsed on the request path (to ask for usage): a parse there holds
every client's relay for its time, tens of milliseconds at this size."""
MAX_READ_BYTES = 64 << 20
"""The largest body the recorder reads its fields from (off the request path): a
request with images runs to megabytes, and without its fields its record would have
no model, stream flag or token counts."""


@dataclass
class RequestInfo:
    """A request body as its dialect reads it: the decoded map and the fields a record keeps."""

    body: dict[str, Any] | None = None
    fields: RequestFields = field(default_factory=RequestFields)


def request_info(path: str, raw: bytes | None) -> RequestInfo:
    """Read the request body of a route a dialect serves (the recorder does this, off
    the request path); nothing for an unknown route, never guessed."""
    info = RequestInfo()
    dialect = dialect_for(path)
    if raw is None or dialect is None or len(raw) > MAX_READ_BYTES:
        return info
    try:
        body = decode_fields(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the stack: not kept
        return info
    if not isinstance(body, dict):
        return info
    info.body = body
    info.fields = dialect.read_request(body)
    return info


def with_usage_requested(path: str, raw: bytes) -> bytes | None:
    """The body with its dialect's usage asked for (``Dialect.ask_usage``), or None to
    send it as is.

    Only streaming requests of a dialect whose streams carry usage when asked, that did
    not ask, are changed. The cheap tests first: most bodies are never parsed here.
    """
    dialect = dialect_for(path)
    if dialect is None or not dialect.usage_asked:
        return None
    if len(raw) > MAX_INSPECT_BYTES or b'"stream"' not in raw:
        return None
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the stack: not kept
        return None
    if not isinstance(body, dict):
        return None
    had_options = "stream_options" in body
    if not dialect.ask_usage(body):
        return None
    # The client's bytes, with the member added or its value replaced: never the body
    # parsed and written again, which would change what the upstream reads (escaped
    # UTF-8 doubles a body's size past a size limit, 1e400 turns into Infinity, a
    # duplicate key goes, numbers change their spelling).
    if not had_options:
        return _with_member_first(raw, b'"stream_options":' + _ASKED)
    return _with_value_replaced(raw, body)


_ASKED = b'{"include_usage":true}'
_OPTIONS_KEY = re.compile(rb'"stream_options"\s*:\s*')
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')
"""A JSON string (skipped whole) or a bracket: enough to find where a value ends."""


def _with_member_first(raw: bytes, member: bytes) -> bytes | None:
    """``raw`` (an object with at least one member and no ``stream_options``) with
    ``member`` first in it; None when it does not begin with ``{`` (a BOM, UTF-16)."""
    start = len(raw) - len(raw.lstrip(b" \t\r\n"))
    if raw[start : start + 1] != b"{":
        return None
    return b"%b%b,%b" % (raw[: start + 1], member, raw[start + 1 :])


def _with_value_replaced(raw: bytes, body: dict[str, Any]) -> bytes | None:
    """``raw`` with its one ``stream_options`` value, an object of the client's, replaced
    by ``body``'s (which asks for usage); None where that cannot be done exactly (the
    key spelled with escapes or twice, or nested somewhere too): the body then goes as
    the client sent it, and its tokens are counted from the stream."""
    keys = list(_OPTIONS_KEY.finditer(raw))
    if len(keys) != 1 or raw[keys[0].end() : keys[0].end() + 1] != b"{":
        return None
    start = keys[0].end()
    end = _value_end(raw, start)
    if end is None:
        return None
    try:
        value = json.dumps(body["stream_options"], ensure_ascii=False, allow_nan=False)
    except ValueError:
        return None
    changed = b"%b%b%b" % (raw[:start], value.encode(), raw[end:])
    try:
        same = json.loads(changed) == body  # the key found was the top level's
    except (ValueError, RecursionError):
        return None
    return changed if same else None


def _value_end(raw: bytes, start: int) -> int | None:
    """Where the object or array beginning at ``start`` ends."""
    depth = 0
    for token in _TOKEN.finditer(raw, start):
        bracket = raw[token.start()]
        if bracket in b"{[":
            depth += 1
        elif bracket in b"}]":
            depth -= 1
            if depth == 0:
                return token.end()
    return None


_USAGE_NULL = re.compile(rb',\s*"usage"\s*:\s*null|"usage"\s*:\s*null\s*,?')
_TAIL_BYTES = 16 << 10


class SseRelay:
    """Relays an SSE stream event by event, undoing an injected ``include_usage``.

    With the injection, OpenAI-style servers add ``"usage": null`` to every chunk
    and one usage-only chunk (``"choices": []``) before ``[DONE]``; both are
    removed, so the client receives the events it would have received. Partial
    events wait for the rest of their bytes (servers send whole events, so this
    adds no delay in practice).
    """

    def __init__(self) -> None:
        self._partial = b""
        self.usage_event: bytes | None = None

    def feed(self, chunk: bytes) -> bytes:
        if not self._partial and chunk.endswith(b"\n\n") and b'"usage"' not in chunk:
            return chunk  # the usual case: whole events, nothing to remove (one scan)
        data = self._partial + chunk
        events, rest = split_events(data)
        if not events:
            if len(data) > _TAIL_BYTES:  # no event boundary in sight: not SSE as we know it
                self._partial = b""
                return data
            self._partial = data
            return b""
        self._partial = rest
        whole = data[: len(data) - len(rest)]
        if b'"usage"' not in whole:
            return whole  # nothing to remove (the usual chunk: one token, no usage field)
        out = []
        for event in events:
            if b'"choices":[]' in event.replace(b" ", b"") and b'"usage":{' in event.replace(
                b" ", b""
            ):
                self.usage_event = event  # kept for the record, not for the client
                continue
            out.append(_USAGE_NULL.sub(b"", event))
        return b"".join(out)

    def flush(self) -> bytes:
        rest, self._partial = self._partial, b""
        return rest
