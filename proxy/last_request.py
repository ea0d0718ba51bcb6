"""``Connection: close`` ends a connection's requests: what a client sends after such
a request (a pipelined second one) is dropped, never parsed into a request, never
forwarded.

aiohttp's parser (llhttp) refuses bytes after a request with ``Connection: close``
("Data after `Connection: close`"), but when they arrive in the same read as the
request it raises before handing that request over: the client got a 400 for a
request it sent correctly. ``LastRequestParser`` feeds such a read in pieces, each
ending at a head's end (``\\r\\n\\r\\n``): every head completes at the end of a piece,
so the request is handed over before the piece in which the bytes after it are
refused; from there on, every byte is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from aiohttp.http_exceptions import BadHttpMessage

__all__ = ["LastRequestParser"]

_CLOSE = re.compile(rb"close", re.IGNORECASE)
"""Only a read that could hold a ``Connection: close`` head is fed in pieces (a cheap
scan; a read without the word is fed whole, as aiohttp would)."""
_HEAD_END = b"\r\n\r\n"
_NOTHING: tuple[tuple[()], bool, bytes] = ((), False, b"")


class LastRequestParser:
    """Wraps a connection's request parser (aiohttp's ``HttpRequestParser``).

    ``watch`` is told of every read fed, and whether a request head was completed by
    it (the connection guard's view of the connection: ``proxy/admission.py``)."""

    __slots__ = ("_closed", "_parser", "_watch")

    def __init__(self, parser: Any, watch: Callable[[bool], None] | None = None) -> None:
        self._parser = parser
        self._watch = watch
        self._closed = False
        """A request with ``Connection: close`` was parsed whole: nothing more is."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)

    def feed_data(self, data: bytes) -> tuple[Any, bool, bytes]:
        if self._closed:
            return _NOTHING
        fed = self._parser.feed_data(data) if _CLOSE.search(data) is None else self._in_pieces(data)
        if self._watch is not None:
            self._watch(bool(fed[0]))
        return fed

    def _in_pieces(self, data: bytes) -> tuple[Any, bool, bytes]:
        messages: list[Any] = []
        start = 0
        while start < len(data):
            end = data.find(_HEAD_END, start)
            end = len(data) if end < 0 else end + len(_HEAD_END)
            try:
                got, upgraded, tail = self._parser.feed_data(data[start:end])
            except BadHttpMessage as exc:
                if not _after_close(exc):
                    raise
                self._closed = True
                return messages, False, b""
            messages.extend(got)
            if upgraded:  # what follows is the new protocol's, not ours to split
                return messages, True, tail + data[end:]
            start = end
        return messages, False, b""


def _after_close(exc: BadHttpMessage) -> bool:
    return "Data after `Connection: close`" in str(exc.message)
