"""The head of a relayed response, written by the proxy itself.

The upstream's headers arrive as a list (``tailreplay/http/client.py``); aiohttp's
response object would turn them into a multidict, prepare it and serialise it
again, about 6 µs a request (bench/proxy.py). Here they are joined once, with the
framing rules aiohttp applies (RFC 9112 §6):

- No body after HEAD, a 1xx, 204 or 304; the length header is dropped after a
  1xx, 204 or 304 (as aiohttp does), kept after HEAD.
- The upstream's Content-Length is passed on when the body is passed on as it
  came; otherwise an HTTP/1.1 client gets the body chunked, and an HTTP/1.0 client
  gets it delimited by the connection's close.
- ``Connection: close`` tells an HTTP/1.1 client the connection ends,
  ``Connection: keep-alive`` an HTTP/1.0 client that it does not.
- A ``Date`` is added when the upstream sent none (RFC 9110 §6.6.1: an origin
  server with a clock sends one).

Bytes pass as they came: header values were decoded as Latin-1 and are encoded
back the same way. A value, name or reason holding a line break or another control
character, or a status of other than three digits, cannot be written as the
upstream meant it; the head is refused (the proxy answers 502).
"""

from __future__ import annotations

import re
import time
from email.utils import formatdate

__all__ = ["EMPTY_BODY_STATUSES", "Framing", "relay_head"]

EMPTY_BODY_STATUSES = frozenset((204, 304, *range(100, 200)))
"""Statuses whose responses never carry a body, nor a length."""


class Framing:
    """How the body after a head is delimited, and whether the connection stays."""

    __slots__ = ("chunked", "empty", "keep_alive")

    def __init__(self, *, chunked: bool, empty: bool, keep_alive: bool) -> None:
        self.chunked = chunked
        self.empty = empty
        """No body may follow the head (HEAD, 1xx, 204, 304)."""
        self.keep_alive = keep_alive


def relay_head(
    version: tuple[int, int],
    method: str,
    status: int,
    reason: str,
    headers: list[tuple[str, str]],
    *,
    keep_alive: bool,
) -> tuple[bytes, Framing] | None:
    """The response head for a client speaking HTTP ``version`` that sent ``method``,
    and the body's framing; None when the head cannot be written safely.

    ``headers`` are the upstream's, hop-by-hop ones already dropped (Content-Length
    too, when the body is changed on its way).

    >>> head, framing = relay_head((1, 1), "POST", 200, "OK", [("Date", "x")], keep_alive=True)
    >>> head, framing.chunked
    (b'HTTP/1.1 200 OK\\r\\nDate: x\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n', True)
    """
    if not 100 <= status <= 999:  # three digits (RFC 9110 §15), or no status line
        return None
    empty = method == "HEAD" or status in EMPTY_BODY_STATUSES
    lines = [f"HTTP/{version[0]}.{version[1]} {status} {reason}"]
    has_length = has_date = False
    for name, value in headers:
        lower = name.lower()
        if lower == "content-length":
            if status in EMPTY_BODY_STATUSES:
                continue
            has_length = True
        elif lower == "date":
            has_date = True
        lines.append(f"{name}: {value}")
    chunked = False
    if not empty and not has_length:
        if version >= (1, 1):
            chunked = True
            lines.append("Transfer-Encoding: chunked")
        else:
            keep_alive = False  # the close is what ends the body
    if not has_date:
        lines.append(f"Date: {_date()}")
    if keep_alive and version == (1, 0):
        lines.append("Connection: keep-alive")
    elif not keep_alive and version >= (1, 1):
        lines.append("Connection: close")
    head = _written(lines)
    if head is None:
        return None
    return head, Framing(chunked=chunked, empty=empty, keep_alive=keep_alive)


def _written(lines: list[str]) -> bytes | None:
    """The head's lines as bytes, or None when one of them would not stay one line as
    the upstream meant it."""
    text = "\r\n".join(lines)
    # Each line is one line: a break inside a value would start a header (or a body)
    # of the upstream's making.
    if text.count("\n") != len(lines) - 1 or text.count("\r") != len(lines) - 1:
        return None
    if _CONTROL.search(text) is not None:  # a NUL in a reason phrase fails strict clients
        return None
    try:
        return (text + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:  # not from the wire (decoded as Latin-1): refused
        return None


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters no head may hold (RFC 9110 §5.5; tab is allowed, CR and LF are
counted above)."""
_date_cache: list[tuple[int, str]] = [(0, "")]


def _date() -> str:
    """Now as an HTTP date, formatted once a second."""
    now = int(time.time())
    second, text = _date_cache[0]
    if second != now:
        text = formatdate(now, usegmt=True)
        _date_cache[0] = (now, text)
    return text
