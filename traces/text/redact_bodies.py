"""Request bodies and span content redacted by the rules of ``redact``: JSON with its
bytes kept (``redact_body``, ``--bodies redacted``), parsed JSON (``redact_value``,
``--otlp-capture-content``), and text for anything else.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

from tailreplay.traces.text.redact import redact_text
from tailreplay.traces.text.redact_json import (
    PAIR_VALUES,
    is_secret_pair,
    masked,
    pair_secrets,
    pairs_masked,
    redact_json,
    redact_near_json,
    user_fingerprint,
)
from tailreplay.traces.text.redact_targets import redact_form
from tailreplay.traces.text.secret_names import USER_FIELDS, is_secret_name

__all__ = ["redact_body", "redact_value"]


MAX_VALUE_DEPTH = 64
"""Span content nested deeper than this is replaced by ``NESTED`` (a request's JSON
can nest past what a recursive walk can follow)."""
NESTED = "[NESTED]"
WIDE_PRINTABLE = 0.95
"""The share of printable characters (tabs and line ends included) that makes a
body without a byte order mark, whose zero bytes say UTF-16 or UTF-32, text."""


def redact_value(value: Any, key: bytes) -> Any:
    """Parsed JSON with every string redacted (``redact_text``), the values of
    credential-named members masked whole (``[SECRET:fp:…]``: strings and member
    numbers, inside them too), ``user`` fields fingerprinted as ``session`` is, and
    the values of name/value pairs naming a credential masked wherever they appear.
    ``redact_body`` applies the same rules to JSON text, keeping its bytes."""
    return _ValueRedactor(key, pair_secrets(value)).walk(value)


class _ValueRedactor:
    def __init__(self, key: bytes, pairs: frozenset[str]) -> None:
        self.key = key
        self.pairs = pairs

    def walk(
        self,
        value: Any,
        name: str | None = None,
        secret: bool = False,
        depth: int = 0,
        schema: bool = False,
    ) -> Any:
        """``value`` redacted, as the member ``name`` (inside a secret one with
        ``secret``). With ``schema``, ``name`` is a property of a JSON Schema's
        ``properties`` (a tool's parameter), not a member holding a value: it masks
        nothing by itself."""
        if depth > MAX_VALUE_DEPTH:
            return NESTED
        secret = secret or (name is not None and not schema and is_secret_name(name))
        if isinstance(value, str):
            return self._string(value, name, secret)
        if isinstance(value, dict):
            pair = is_secret_pair(value.items())
            return {
                redact_text(str(k), self.key): self.walk(
                    v,
                    str(k),
                    secret or (pair and str(k).lower() in PAIR_VALUES),
                    depth + 1,
                    name == "properties",
                )
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.walk(v, None, secret, depth + 1) for v in value]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if secret and number:  # a member's number, or one in its list: `"pins": [1234]`
            return masked("SECRET", self.key, json.dumps(value))
        return value

    def _string(self, value: str, name: str | None, secret: bool) -> str:
        key = self.key
        if secret:
            return masked("SECRET", key, value)
        if name in USER_FIELDS:
            return user_fingerprint(key, value)
        if value in self.pairs:
            return masked("SECRET", key, value)
        value = pairs_masked(value, key, self.pairs)
        if value.lstrip()[:1] in ("{", "[") and (nested := redact_json(value, key)) is not None:
            return nested  # a tool call's arguments: JSON in a string, redacted as JSON
        return redact_text(value, key)


_FORM = re.compile(r"[\w.%\[\]+-]+=[^&\s]*(?:&[\w.%\[\]+-]+=[^&\s]*)*\s*")
_DISPOSITION_NAME = re.compile(r'(?i)content-disposition:[^\r\n]*?\bname=(?:"([^"]*)"|([^;\s"]+))')
# A boundary line (RFC 2046 §5.1.1: 1 to 70 characters, none of them a line end):
# the body's first line, or after a preamble a line followed by a part's header.
_FIRST_BOUNDARY = re.compile(r"--([^\s]{1,70})(\r?\n)")
_BOUNDARY = re.compile(r"^--([^\r\n]{1,70})(\r?\n)(?=(?i:content-(?:disposition|type)):)", re.M)


def _redact_multipart(text: str, key: bytes) -> str | None:
    """A ``multipart/form-data`` body: each field named like a credential masked whole,
    other text fields and the preamble and epilogue redacted as text, file fields
    kept; None when ``text`` is not one. Lines may end in CRLF or, as some clients
    write them, LF; a field's name may be quoted or not. After a preamble, files are
    redacted as text too: a prompt can quote a form, and its "file" is prompt text."""
    found = _FIRST_BOUNDARY.match(text) or _BOUNDARY.search(text)
    if found is None:
        return None
    keep_files = found.start() == 0
    newline = found[2]
    delimiter = newline + "--" + found[1]
    pieces = (newline + text).split(delimiter)
    out = [redact_text(pieces[0], key)]  # the preamble, if any
    for piece in pieces[1:]:
        head, sep, content = piece.partition(newline * 2)
        if piece.startswith("--") or not sep:  # the closing delimiter, or no part
            out.append(redact_text(piece, key))
            continue
        name = _DISPOSITION_NAME.search(head)
        if name is not None and is_secret_name(name[1] if name[1] is not None else name[2]):
            content = masked("SECRET", key, content)
        elif not (keep_files and "filename=" in head.lower()):
            content = redact_text(content, key)
        out.append(redact_text(head, key) + sep + content)
    return delimiter.join(out)[len(newline) :]


def _encoding(body: bytes) -> tuple[str, bytes]:
    """The codec of a body's text and its byte order mark: UTF-8, or the UTF-16 or
    UTF-32 that JSON allows (RFC 8259 §8.1 readers detect them by their BOM or the
    zero bytes of their first characters, as ``json.detect_encoding`` does). Read as
    UTF-8, UTF-16 text is its letters apart by zero bytes, and no rule finds a word."""
    found = json.detect_encoding(body)
    if found == "utf-8-sig":
        return "utf-8", codecs.BOM_UTF8
    for width, big, little in (
        ("32", codecs.BOM_UTF32_BE, codecs.BOM_UTF32_LE),
        ("16", codecs.BOM_UTF16_BE, codecs.BOM_UTF16_LE),
    ):
        if found == f"utf-{width}":  # a BOM of either order
            return (f"utf-{width}-be", big) if body.startswith(big) else (f"utf-{width}-le", little)
    return found, b""


def _wide_text(body: bytes, codec: str, bom: bytes) -> str | None:
    """A UTF-16 or UTF-32 body's text: after its byte order mark (undecodable units,
    an odd byte count, become U+FFFD: read as UTF-8, the credential would stay in
    bytes no rule reads), or without one when it decodes to text a person could read
    (``WIDE_PRINTABLE``). Zero bytes at the start of anything else (a binary or
    gRPC-framed body, text after a NUL) are no encoding: such bytes read as UTF-16
    are mostly unassigned or control code points."""
    if bom:
        return body[len(bom) :].decode(codec, "replace")
    try:
        text = body.decode(codec)
    except UnicodeDecodeError:
        return None
    printable = sum(c.isprintable() or c in "\t\r\n" for c in text)
    return text if printable >= WIDE_PRINTABLE * len(text) else None


def redact_body(body: bytes, key: bytes) -> bytes:
    """A request body as ``--bodies redacted`` keeps it.

    A JSON body keeps every byte outside the strings it masks: each string literal
    is decoded, redacted and, only if something in it was masked, written again;
    credential-named members are masked whole and ``user`` fingerprinted
    (``redact_value``'s rules); a string holding JSON (a tool call's ``arguments``)
    is redacted as JSON; the values of name/value pairs naming a credential are
    masked wherever they appear. A form (``a=1&b=2``) has each field judged as a
    query parameter is (a masked value is ``[SECRET:fp:…]`` whatever it held); a
    multipart form each part by its field name, files kept. Any other body is
    redacted as text. UTF-16 and UTF-32 bodies, and UTF-8 after a byte order mark,
    are read and written back in their own encoding.
    """
    codec, bom = _encoding(body)
    if codec != "utf-8" and (text := _wide_text(body, codec, bom)) is not None:
        return bom + _redact_decoded(text, key).encode(codec, "surrogatepass")
    try:
        text = body[len(bom) :].decode("utf-8")
    except UnicodeDecodeError:
        # Not UTF-8: a multipart form keeps its files' bytes; anything else is text,
        # its undecodable bytes replaced.
        multipart = _redact_multipart(body.decode("utf-8", "surrogateescape"), key)
        if multipart is not None:
            return multipart.encode("utf-8", "surrogateescape")
        return _redact_decoded(body.decode("utf-8", "replace"), key).encode()
    return bom + _redact_decoded(text, key).encode("utf-8", "surrogatepass")


def _redact_decoded(text: str, key: bytes) -> str:
    """A body's text redacted by the first reading of it that holds: JSON, a form,
    a multipart form, else text."""
    redacted = redact_json(text, key)
    if redacted is None and _FORM.fullmatch(text):
        redacted = redact_form(text, key)
    if redacted is None:
        redacted = _redact_multipart(text, key)
    if redacted is None:
        redacted = redact_near_json(text, key)
    if redacted is None:
        redacted = redact_text(text, key)
    return redacted
