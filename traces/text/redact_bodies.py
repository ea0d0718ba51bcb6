"""Request bodies and span content redacted by the rules of ``redact``: JSON with its
bytes kept (``redact_body``, ``--bodies redacted``), parsed JSON (``redact_value``,
``--otlp-capture-content``), and text for anything else.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tailreplay.traces.text.redact import fingerprint, redact_text
from tailreplay.traces.text.secret_names import USER_FIELDS, is_secret_name

__all__ = ["redact_body", "redact_value"]


def _masked(kind: str, key: bytes, value: str) -> str:
    return f"[{kind}:{fingerprint(key, value)}]"


def _user(key: bytes, value: str) -> str:
    return fingerprint(key, "user:" + value)  # as the record's session


def redact_value(value: Any, key: bytes, name: str | None = None, secret: bool = False) -> Any:
    """Parsed JSON with every string redacted (``redact_text``), the values of
    credential-named members masked whole (``[SECRET:fp:…]``: strings and member
    numbers, inside them too) and ``user`` fields fingerprinted as ``session`` is.
    ``redact_body`` applies the same rules to JSON text, keeping its bytes."""
    secret = secret or (name is not None and is_secret_name(name))
    if isinstance(value, str):
        if secret:
            return _masked("SECRET", key, value)
        if name in USER_FIELDS:
            return _user(key, value)
        return redact_text(value, key)
    if isinstance(value, dict):
        return {
            redact_text(str(k), key): redact_value(v, key, str(k), secret) for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_value(v, key, None, secret) for v in value]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if secret and name is not None and number:  # a member's number: `"pin": 1234`
        return _masked("SECRET", key, json.dumps(value))
    return value


_STRING = r'"(?:[^"\\]|\\.)*"'
_MEMBER = re.compile(rf"({_STRING})(?:(\s*:\s*)({_STRING}|-?\d[\d.eE+-]*)?)?")


def _literal(text: str) -> str:
    """A JSON string literal's value (its escapes decoded)."""
    if "\\" not in text:
        return text[1:-1]
    try:
        value = json.loads(text)
    except ValueError:
        return text[1:-1]
    return value if isinstance(value, str) else text[1:-1]


def _redact_literal(literal: str, key: bytes) -> str:
    """A JSON string literal redacted: unchanged bytes when nothing in it is masked."""
    value = _literal(literal)
    redacted = redact_text(value, key)
    if redacted == value:
        return literal
    return '"' + redacted + '"' if "\\" not in literal else json.dumps(redacted)


class _JsonRedactor:
    """Walks a JSON text's string literals in order, keeping every byte between them.

    ``depth`` counts open brackets between literals; ``secret_depth`` is set while
    inside the value of a credential-named member: every string there is masked.
    """

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.depth = 0
        self.secret_depth: int | None = None
        self.opens_container = False
        """The text after the current literal starts an object or an array."""

    def member(self, name_literal: str, sep: str | None, value: str | None) -> str:
        key = self.key
        out = _redact_literal(name_literal, key)
        if sep is None:  # an array element or a lone value
            if self.secret_depth is not None:
                return json.dumps(_masked("SECRET", key, _literal(name_literal)))
            return out
        name = _literal(name_literal)
        secret = self.secret_depth is not None or is_secret_name(name)
        if value is None:  # an object, an array, true, false or null follows
            if secret and self.secret_depth is None and self.opens_container:
                self.secret_depth = self.depth
            return out + sep
        text = _literal(value) if value.startswith('"') else value
        if secret:
            value = json.dumps(_masked("SECRET", key, text))
        elif name in USER_FIELDS and value.startswith('"'):
            value = json.dumps(_user(key, text))
        elif value.startswith('"'):
            value = _redact_literal(value, key)
        return out + sep + value

    def run(self, text: str) -> str:
        out: list[str] = []
        pos = 0
        for m in _MEMBER.finditer(text):
            gap = text[pos : m.start()]
            out.append(gap)
            self._walk(gap)
            self.opens_container = text[m.end() : m.end() + 1] in ("{", "[")
            out.append(self.member(m.group(1), m.group(2), m.group(3)))
            pos = m.end()
        out.append(text[pos:])
        return "".join(out)

    def _walk(self, gap: str) -> None:
        """Brackets between two literals; a secret value ends where its brackets close."""
        if self.secret_depth is None:
            self.depth += sum(gap.count(c) for c in "{[") - sum(gap.count(c) for c in "}]")
            return
        for ch in gap:
            if ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.secret_depth is not None and self.depth <= self.secret_depth:
                    self.secret_depth = None


def redact_body(body: bytes, key: bytes) -> bytes:
    """A request body as ``--bodies redacted`` keeps it.

    A JSON body keeps every byte outside the strings it masks: each string literal
    is decoded, redacted and, only if something in it was masked, written again;
    credential-named members are masked whole and ``user`` fingerprinted
    (``redact_value``'s rules). Any other body is redacted as text.
    """
    try:
        text = body.decode("utf-8")
        json.loads(text)
    except ValueError:  # UnicodeDecodeError included
        return redact_text(body.decode("utf-8", "replace"), key).encode()
    return _JsonRedactor(key).run(text).encode("utf-8", "surrogatepass")
