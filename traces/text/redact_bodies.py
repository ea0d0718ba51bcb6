"""Request bodies and span content redacted by the rules of ``redact``: JSON with its
bytes kept (``redact_body``, ``--bodies redacted``), parsed JSON (``redact_value``,
``--otlp-capture-content``), and text for anything else.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

from tailreplay.traces.text.memo import SizedMemo
from tailreplay.traces.text.redact import fingerprint, redact_form, redact_text
from tailreplay.traces.text.secret_names import USER_FIELDS, is_secret_name

__all__ = ["redact_body", "redact_value"]


def _masked(kind: str, key: bytes, value: str) -> str:
    return f"[{kind}:{fingerprint(key, value)}]"


def _user(key: bytes, value: str) -> str:
    return fingerprint(key, "user:" + value)  # as the record's session


MAX_VALUE_DEPTH = 64
"""Span content nested deeper than this is replaced by ``NESTED`` (a request's JSON
can nest past what a recursive walk can follow)."""
NESTED = "[NESTED]"


def redact_value(value: Any, key: bytes) -> Any:
    """Parsed JSON with every string redacted (``redact_text``), the values of
    credential-named members masked whole (``[SECRET:fp:…]``: strings and member
    numbers, inside them too), ``user`` fields fingerprinted as ``session`` is, and
    the values of name/value pairs naming a credential masked wherever they appear.
    ``redact_body`` applies the same rules to JSON text, keeping its bytes."""
    return _ValueRedactor(key, _pair_secrets(value)).walk(value)


def _pairs_masked(value: str, key: bytes, pairs: frozenset[str]) -> str:
    """``value`` with the values of credential-naming pairs quoted in it masked: the
    same secret elsewhere gets the same mask (a whole value that is one is masked by
    the callers)."""
    for secret in pairs:
        if len(secret) >= 6 and secret in value:
            value = value.replace(secret, _masked("SECRET", key, secret))
    return value


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
            pair = _is_secret_pair(value)
            return {
                redact_text(str(k), self.key): self.walk(
                    v,
                    str(k),
                    secret or (pair and str(k).lower() in _PAIR_VALUES),
                    depth + 1,
                    name == "properties",
                )
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.walk(v, None, secret, depth + 1) for v in value]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if secret and number:  # a member's number, or one in its list: `"pins": [1234]`
            return _masked("SECRET", self.key, json.dumps(value))
        return value

    def _string(self, value: str, name: str | None, secret: bool) -> str:
        key = self.key
        if secret:
            return _masked("SECRET", key, value)
        if name in USER_FIELDS:
            return _user(key, value)
        if value in self.pairs:
            return _masked("SECRET", key, value)
        value = _pairs_masked(value, key, self.pairs)
        if value.lstrip()[:1] in ("{", "[") and (nested := _redact_json(value, key)) is not None:
            return nested  # a tool call's arguments: JSON in a string, redacted as JSON
        return redact_text(value, key)


# A JSON string literal, as an unrolled loop: runs of plain characters are matched
# by one repeat, not one alternation each (16 µs for a 4 KB string against 68).
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
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


NESTED_JSON_DEPTH = 4
"""JSON inside a string (a tool call's ``arguments``) is redacted as JSON this deep."""


STRINGS: SizedMemo[str] = SizedMemo(capacity=4 << 20)
"""Recently redacted strings, by (string, nesting, key), up to 4 M characters: a
conversation's earlier messages and its system prompt come again in each of its
requests, and the names and roles of every request are the same few; each is
redacted once."""
_ENTRY_CHARS = 64
"""An entry's own memory, counted in characters (a dict slot, a tuple, a str head)."""


def _redact_literal(
    literal: str, key: bytes, nested: int = 0, pairs: frozenset[str] = frozenset()
) -> str:
    """A JSON string literal redacted: unchanged bytes when nothing in it is masked.
    One that holds JSON itself (a tool call's ``arguments``) is redacted as JSON."""
    value = _literal(literal)
    if value in pairs:
        return json.dumps(_masked("SECRET", key, value))
    redacted = _redact_string(value, key, nested, pairs)
    if redacted == value:
        return literal
    return (
        '"' + redacted + '"'
        if "\\" not in literal and '"' not in redacted
        else json.dumps(redacted)
    )


def _redact_string(value: str, key: bytes, nested: int, pairs: frozenset[str]) -> str:
    """A JSON string's value redacted (as JSON, when it holds JSON), remembered in
    ``STRINGS`` unless the document has secrets of its own (``pairs``)."""
    if pairs:
        return _redact_new_string(value, key, nested, pairs)
    memo_key = (value, nested, key)
    redacted = STRINGS.get(memo_key)
    if redacted is None:
        redacted = _redact_new_string(value, key, nested, pairs)
        if redacted == value:
            redacted = value  # one copy held, not two
        size = _ENTRY_CHARS + len(value) + (redacted is not value) * len(redacted)
        STRINGS.put(memo_key, redacted, size)
    return redacted


def _redact_new_string(value: str, key: bytes, nested: int, pairs: frozenset[str]) -> str:
    value = _pairs_masked(value, key, pairs)
    if nested < NESTED_JSON_DEPTH and value.lstrip()[:1] in ("{", "["):
        redacted = _redact_json(value, key, nested + 1)
        if redacted is not None:
            return redacted
    return redact_text(value, key)


class _JsonRedactor:
    """Walks a JSON text's string literals in order, keeping every byte between them.

    ``depth`` counts open brackets between literals; ``secret_depth`` is set while
    inside the value of a credential-named member: every string there is masked.
    ``schema_depths`` are the depths of the open ``properties`` objects of JSON
    Schemas (a tool's parameters): their members name properties, not values, and a
    property named ``password`` keeps its ``{"type": "string"}`` (a masked type
    would make the replayed request invalid).
    """

    def __init__(self, key: bytes, nested: int = 0, pairs: frozenset[str] = frozenset()) -> None:
        self.key = key
        self.nested = nested
        self.pairs = pairs
        """Values masked wherever they appear: those of name/value pairs that name a
        credential (``{"name": "OPENAI_API_KEY", "value": …}``)."""
        self.depth = 0
        self.secret_depth: int | None = None
        self.schema_depths: list[int] = []
        self.opens = ""
        """What the text after the current literal opens: ``{``, ``[`` or nothing."""

    def member(self, name_literal: str, sep: str | None, value: str | None) -> str:
        key = self.key
        out = _redact_literal(name_literal, key, self.nested, self.pairs)
        if sep is None:  # an array element or a lone value
            if self.secret_depth is not None:
                return json.dumps(_masked("SECRET", key, _literal(name_literal)))
            return out
        name = _literal(name_literal)
        property_name = bool(self.schema_depths) and self.schema_depths[-1] == self.depth
        secret = self.secret_depth is not None or (not property_name and is_secret_name(name))
        if value is None:  # an object, an array, true, false or null follows
            if secret and self.secret_depth is None and self.opens:
                self.secret_depth = self.depth
            elif name == "properties" and self.opens == "{":
                self.schema_depths.append(self.depth + 1)
            return out + sep
        text = _literal(value) if value.startswith('"') else value
        if secret:
            value = json.dumps(_masked("SECRET", key, text))
        elif name in USER_FIELDS and value.startswith('"'):
            value = json.dumps(_user(key, text))
        elif value.startswith('"'):
            value = _redact_literal(value, key, self.nested, self.pairs)
        return out + sep + value

    def run(self, text: str) -> str:
        out: list[str] = []
        pos = 0
        for m in _MEMBER.finditer(text):
            out.append(self._walk(text[pos : m.start()]))
            after = text[m.end() : m.end() + 1]
            self.opens = after if after in ("{", "[") else ""
            out.append(self.member(m.group(1), m.group(2), m.group(3)))
            pos = m.end()
        out.append(self._walk(text[pos:]))
        return "".join(out)

    def _walk(self, gap: str) -> str:
        """Brackets between two literals; a secret value ends where its brackets close."""
        # The lowest depth the gap reaches: `}}, [{` closes a schema's properties
        # and opens another object to the same depth between two literals.
        lowest = _lowest_depth(gap, self.depth) if self.schema_depths else self.depth
        if self.secret_depth is None:
            self.depth += sum(gap.count(c) for c in "{[") - sum(gap.count(c) for c in "}]")
        else:
            gap = self._walk_secret(gap)
        while self.schema_depths and self.schema_depths[-1] > lowest:
            self.schema_depths.pop()  # a schema's properties closed
        return gap

    def _walk_secret(self, gap: str) -> str:
        """A gap inside a secret value: numbers (``"pins": [1234]``) are masked as its
        strings are, up to the bracket that closes the value."""
        out: list[str] = []
        pos = 0
        for m in _BRACKET_OR_NUMBER.finditer(gap):
            out.append(gap[pos : m.start()])
            pos = m.end()
            token = m[0]
            if token in "{[":
                self.depth += 1
            elif token in "}]":
                self.depth -= 1
                if self.secret_depth is not None and self.depth <= self.secret_depth:
                    self.secret_depth = None
            elif self.secret_depth is not None:
                token = json.dumps(_masked("SECRET", self.key, token))
            out.append(token)
        out.append(gap[pos:])
        return "".join(out)


def _lowest_depth(gap: str, depth: int) -> int:
    """The lowest bracket depth ``gap`` closes to, or the one it ends at (entered at
    ``depth``: a schema's properties opened just before it are open at its start)."""
    lowest = None
    for ch in gap:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            lowest = depth if lowest is None else min(lowest, depth)
    return depth if lowest is None else min(lowest, depth)


_BRACKET_OR_NUMBER = re.compile(r"[{}\[\]]|-?\d[\d.eE+-]*")


_PAIR_NAMES = frozenset({"name", "key", "header", "env", "variable", "var"})
_PAIR_VALUES = frozenset({"value", "val", "secret", "data"})


def _is_secret_pair(node: dict[Any, Any]) -> bool:
    """Whether an object is a name/value pair whose name is a credential's."""
    return any(
        isinstance(k, str) and isinstance(v, str) and k.lower() in _PAIR_NAMES and is_secret_name(v)
        for k, v in node.items()
    )


def _pair_secrets(doc: Any) -> frozenset[str]:
    """The values of name/value pairs whose name is a credential's, anywhere in a
    parsed document: ``{"name": "OPENAI_API_KEY", "value": "…"}`` (environment
    lists, header lists, secret stores)."""
    found: set[str] = set()
    pending = [doc]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            pending.extend(node.values())
            if _is_secret_pair(node):
                found.update(
                    v
                    for k, v in node.items()
                    if isinstance(k, str) and k.lower() in _PAIR_VALUES and isinstance(v, str)
                )
    return frozenset(found)


def _redact_json(text: str, key: bytes, nested: int = 0) -> str | None:
    """JSON text redacted with its bytes kept, or None when ``text`` is not JSON."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    strings = _untouched_strings(doc, key, nested)
    if strings is not None and strings == _literal_count(text):
        return text  # as it was (and no member lost to a duplicate name hides one)
    return _JsonRedactor(key, nested, _pair_secrets(doc)).run(text)


_STRING_RE = re.compile(_STRING)


def _literal_count(text: str) -> int:
    """How many string literals a JSON text holds: half its quotes, less the escaped
    ones (a quote after a backslash is one, unless a backslash is escaped too)."""
    if "\\\\" in text:
        return sum(1 for _ in _STRING_RE.finditer(text))
    return (text.count('"') - text.count('\\"')) // 2


_WATCHED = USER_FIELDS | {"properties"}
"""Member names whose values the walk treats apart (``_JsonRedactor.member``)."""


def _untouched_strings(doc: Any, key: bytes, nested: int) -> int | None:
    """How many strings (names and values) a parsed document holds, if redaction
    changes none of them and masks no member: the usual request, whose text can be
    kept without walking it literal by literal. None if anything would change."""
    count = 0
    pending = [doc]
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            count += 1
            if _redact_string(node, key, nested, frozenset()) != node:
                return None
        elif isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            for name, value in node.items():
                count += 1
                if name in _WATCHED or is_secret_name(name):
                    return None
                if _redact_string(name, key, nested, frozenset()) != name:
                    return None
                if name.lower() in _PAIR_NAMES and isinstance(value, str) and is_secret_name(value):
                    return None  # a name/value pair naming a credential
                pending.append(value)
    return count


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
            content = _masked("SECRET", key, content)
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
    bytes no rule reads), or without one when it is JSON. Zero bytes at the start of
    anything else (a binary or gRPC-framed body, text after a NUL) are no encoding."""
    if bom:
        return body[len(bom) :].decode(codec, "replace")
    try:
        text = body.decode(codec)
        json.loads(text)
    except (ValueError, RecursionError):
        return None
    return text


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
        return redact_text(body.decode("utf-8", "replace"), key).encode()
    return bom + _redact_decoded(text, key).encode("utf-8", "surrogatepass")


def _redact_decoded(text: str, key: bytes) -> str:
    """A body's text redacted by the first reading of it that holds: JSON, a form,
    a multipart form, else text."""
    redacted = _redact_json(text, key)
    if redacted is None and _FORM.fullmatch(text):
        redacted = redact_form(text, key)
    if redacted is None:
        redacted = _redact_multipart(text, key)
    if redacted is None:
        redacted = redact_text(text, key)
    return redacted
