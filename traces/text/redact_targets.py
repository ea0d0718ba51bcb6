"""Credentials in what names its values: header pairs, a request target's path
segments and query parameters, form bodies and URLs in log lines. A value is masked
when its name is a credential's (``secret_names.py``) or it holds a credential by the
text rules (``redact.has_credential``); every other byte is kept as it came. What
was found clean is remembered (``CleanValues``), so the pairs and paths a capture
repeats are judged once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote, unquote_plus

from tailreplay.traces.text.redact import fingerprint, has_credential
from tailreplay.traces.text.secret_names import is_secret_name

__all__ = [
    "REMEMBERED_LEN",
    "CleanValues",
    "redact_form",
    "redact_headers",
    "redact_path",
    "redact_url",
]


class CleanValues:
    """Header pairs and request targets already found to hold nothing to mask, for one
    set of ``extra`` header names: a capture's requests repeat them (``Host``,
    ``Content-Type``, ``User-Agent``, a few paths), and a set lookup costs a tenth of
    the search. Only what is kept as it came is remembered, so no secret is held
    here; each set is emptied when it reaches ``capacity`` (values come from clients)."""

    __slots__ = ("capacity", "headers", "paths")

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self.headers: set[tuple[str, str]] = set()
        self.paths: set[str] = set()

    def remember(self, found: set[Any], value: Any) -> None:
        if len(found) >= self.capacity:
            found.clear()
        found.add(value)


REMEMBERED_LEN = 512
"""Longer values are judged every time rather than remembered."""


def redact_headers(
    headers: Iterable[tuple[str, str]],
    extra: frozenset[str],
    key: bytes,
    clean: CleanValues | None = None,
) -> list[tuple[str, str]]:
    """Headers as recorded (names lower-cased): a credential's name, an ``extra`` name,
    or a value holding a credential shape or an email, and the value becomes a
    fingerprint. With ``clean`` (kept for one ``extra``), each pair not known clean is
    judged on its own and remembered when it is."""
    out = [(name.lower(), value) for name, value in headers]
    if clean is not None:
        known = clean.headers
        return [pair if pair in known else _header(pair, extra, key, clean) for pair in out]
    secret = [is_secret_name(name, extra) for name, _ in out]
    # One search over every other value (the usual case: nothing), then each if needed.
    rest = "\n".join(v for (_, v), s in zip(out, secret, strict=True) if not s)
    if rest and has_credential(rest):
        secret = [s or has_credential(v) for (_, v), s in zip(out, secret, strict=True)]
    return [
        (name, fingerprint(key, value) if s else value)
        for (name, value), s in zip(out, secret, strict=True)
    ]


def _header(
    pair: tuple[str, str], extra: frozenset[str], key: bytes, clean: CleanValues
) -> tuple[str, str]:
    name, value = pair
    if is_secret_name(name, extra) or (value and has_credential(value)):
        return name, fingerprint(key, value)
    if len(value) <= REMEMBERED_LEN:
        clean.remember(clean.headers, pair)
    return pair


def _redact_piece(piece: str, mask: Callable[[str], str], plus: bool) -> str:
    """One ``name=value`` parameter or path segment: the value masked if the name is a
    credential's or the (percent-decoded) text holds a credential or an email."""
    decode = unquote_plus if plus else unquote
    name, eq, value = piece.partition("=")
    if eq and is_secret_name(decode(name), url=True):
        return f"{name}={mask(decode(value))}" if value else piece
    text = decode(value if eq else piece)
    if text and has_credential(text):
        return f"{name}={mask(text)}" if eq else mask(text)
    return piece


def _redact_target(target: str, mask: Callable[[str], str]) -> str:
    """Path segments (and their ``;`` parameters) and query parameters (``&`` or ``;``),
    each masked on its own; every other byte is kept as it was."""
    # The usual case: no parameters, nothing shaped like a credential in any segment
    # (each decoded on its own, as each is judged: `%2F` inside one is no separator).
    if "=" not in target and not has_credential("\n".join(map(unquote, target.split("/")))):
        return target
    path, sep, query = target.partition("?")
    segments = (
        "".join(_redact_piece(p, mask, False) if p != ";" else p for p in re.split(r"(;)", s))
        for s in path.split("/")
    )
    path = "/".join(segments)
    if sep:
        query = "".join(
            _redact_piece(p, mask, True) if p not in ("&", ";") else p
            for p in re.split(r"([&;])", query)
        )
    return path + sep + query


def redact_path(path: str, key: bytes, clean: CleanValues | None = None) -> str:
    """A request target as recorded: credentials in path segments and query parameters
    fingerprinted (a target ``clean`` knows is kept as it is).

    >>> redact_path("/v1/x;api_key=abc?a=1;token=def", b"k")
    '/v1/x;api_key=fp:…?a=1;token=fp:…'
    """
    if clean is not None and path in clean.paths:
        return path
    out = _redact_target(path, lambda value: fingerprint(key, value))
    if clean is not None and out == path and len(path) <= REMEMBERED_LEN:
        clean.remember(clean.paths, path)
    return out


def redact_form(form: str, key: bytes) -> str:
    """A form-encoded body (``a=1&user[password]=…``) as recorded: each field judged as
    a query parameter is, a masked value written ``[SECRET:fp:…]``.

    >>> redact_form("user=bob&user[password]=hunter2", b"k")
    'user=bob&user[password]=[SECRET:fp:…]'
    """

    def mask(value: str) -> str:
        return f"[SECRET:{fingerprint(key, value)}]"

    return "".join(
        _redact_piece(p, mask, True) if p not in ("&", ";") else p
        for p in re.split(r"([&;])", form)
    )


def redact_url(url: str) -> str:
    """A URL fit for a log line: user and password, and credentials in the path and
    query, replaced by ``***``.

    >>> redact_url("http://user:pw@127.0.0.1:8000/v1?key=abc")
    'http://***@127.0.0.1:8000/v1?key=***'
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _redact_target(url, lambda _: "***")
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, target = rest[:cut], rest[cut:]
    _userinfo, at, host = authority.rpartition("@")
    return f"{scheme}://{'***@' if at else ''}{host}{_redact_target(target, lambda _: '***')}"
