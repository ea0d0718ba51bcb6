"""JSON text redacted with its bytes kept: each string literal decoded, redacted by
the rules of ``redact`` and written again only if something in it was masked;
credential-named members masked whole (their numbers too), ``user`` fingerprinted,
the values of name/value pairs naming a credential masked wherever they appear,
JSON inside strings redacted as JSON. ``redact_bodies`` applies it to request
bodies and ``redact_value`` the same rules to parsed JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from tailreplay.traces.text.memo import SizedMemo
from tailreplay.traces.text.redact import fingerprint, redact_text
from tailreplay.traces.text.secret_names import USER_FIELDS, is_secret_name

__all__ = [
    "PAIR_VALUES",
    "STRINGS",
    "is_secret_pair",
    "masked",
    "pair_secrets",
    "pairs_masked",
    "redact_json",
    "redact_near_json",
    "user_fingerprint",
]


def masked(kind: str, key: bytes, value: str) -> str:
    return f"[{kind}:{fingerprint(key, value)}]"


def user_fingerprint(key: bytes, value: str) -> str:
    return fingerprint(key, "user:" + value)  # as the record's session


def pairs_masked(value: str, key: bytes, pairs: frozenset[str]) -> str:
    """``value`` with the values of credential-naming pairs quoted in it masked: the
    same secret elsewhere gets the same mask (a whole value that is one is masked by
    the callers)."""
    for secret in pairs:
        if len(secret) >= 6 and secret in value:
            value = value.replace(secret, masked("SECRET", key, secret))
    return value


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
        return json.dumps(masked("SECRET", key, value))
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
    value = pairs_masked(value, key, pairs)
    if nested < NESTED_JSON_DEPTH and value.lstrip()[:1] in ("{", "["):
        redacted = redact_json(value, key, nested + 1, pairs)
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
                return json.dumps(masked("SECRET", key, _literal(name_literal)))
            return out
        name = _literal(name_literal)
        # A schema's property is defined by an object: `"password": "hunter2"` under a
        # member named properties is a value, judged by its name.
        property_name = (
            bool(self.schema_depths)
            and self.schema_depths[-1] == self.depth
            and value is None
            and self.opens == "{"
        )
        secret = self.secret_depth is not None or (not property_name and is_secret_name(name))
        if value is None:  # an object, an array, true, false or null follows
            if secret and self.secret_depth is None and self.opens:
                self.secret_depth = self.depth
            elif name == "properties" and self.opens == "{":
                self.schema_depths.append(self.depth + 1)
            return out + sep
        text = _literal(value) if value.startswith('"') else value
        if secret:
            value = json.dumps(masked("SECRET", key, text))
        elif name in USER_FIELDS and value.startswith('"'):
            value = json.dumps(user_fingerprint(key, text))
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
                token = json.dumps(masked("SECRET", self.key, token))
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
PAIR_VALUES = frozenset({"value", "val", "secret", "data"})


def is_secret_pair(members: Iterable[tuple[Any, Any]]) -> bool:
    """Whether an object is a name/value pair whose name is a credential's."""
    return any(
        isinstance(k, str) and isinstance(v, str) and k.lower() in _PAIR_NAMES and is_secret_name(v)
        for k, v in members
    )


def pair_secrets(doc: Any) -> frozenset[str]:
    """The values of name/value pairs whose name is a credential's, anywhere in a
    parsed document: ``{"name": "OPENAI_API_KEY", "value": "…"}`` (environment
    lists, header lists, secret stores) and ``["X-Api-Token", "…"]``; a value that
    is a list or an object gives every string in it. Objects may be parsed as
    ``_Members`` (every member kept)."""
    found: set[str] = set()
    for node, members in _nodes(doc):
        if members is not None and is_secret_pair(members):
            values = [v for k, v in members if isinstance(k, str) and k.lower() in PAIR_VALUES]
            found.update(node for node, _ in _nodes(values) if isinstance(node, str))
        elif _is_secret_list_pair(node):
            found.add(node[1])
    found.discard("")  # nothing to hide, and every other empty string would be masked
    return frozenset(found)


def _is_secret_list_pair(node: Any) -> bool:
    """A pair as a list: ``["X-Api-Token", "…"]`` (header lists as many clients write
    them), whose first string names a credential."""
    return (
        isinstance(node, list)
        and len(node) == 2
        and all(isinstance(v, str) for v in node)
        and is_secret_name(node[0])
    )


_Pairs = Iterable[tuple[Any, Any]]


def _nodes(doc: Any) -> Iterator[tuple[Any, _Pairs | None]]:
    """Every value in a parsed document, depth first, each with its members if it is
    an object (a dict, or ``_Members`` where a name may come twice)."""
    pending = [doc]
    while pending:
        node = pending.pop()
        members: _Pairs | None = None
        if isinstance(node, _Members):
            members = node
        elif isinstance(node, dict):
            members = node.items()
        elif isinstance(node, list):
            pending.extend(node)
        if members is not None:
            pending.extend(value for _, value in members)
        yield node, members


def redact_json(
    text: str, key: bytes, nested: int = 0, outer: frozenset[str] = frozenset()
) -> str | None:
    """JSON text redacted with its bytes kept, or None when ``text`` is not JSON;
    ``outer``: the secrets of the documents it is nested in (``_pair_secrets``)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    literals = _literal_count(text)
    if not outer and len(text) <= STRINGS.capacity // 4:  # larger: not remembered
        strings = _untouched_strings(doc, key, nested)
        if strings is not None and strings == literals:
            return text  # as it was (and no member lost to a duplicate name hides one)
    pairs = pair_secrets(doc) | outer
    if literals != _string_count(doc):  # a member name given twice: json.loads kept one
        pairs |= pair_secrets(json.loads(text, object_pairs_hook=_Members))
    return _JsonRedactor(key, nested, pairs).run(text)


def redact_near_json(text: str, key: bytes) -> str | None:
    """Text that opens as JSON but does not parse (a trailing comma, one document a
    line, a number longer than Python reads, bytes that were not UTF-8) redacted
    as JSON where its literals say so, then as text; None when it does not open
    with ``{`` or ``[``. Other readers accept what ``json.loads`` refuses, so the
    names that mask a value in JSON must mask it here too."""
    if text.lstrip(" \t\r\n\ufeff")[:1] not in ("{", "["):  # byte order marks, too
        return None
    return redact_text(_JsonRedactor(key).run(text), key)


class _Members(list[tuple[str, Any]]):
    """An object's members in order, duplicates kept (``json.loads``'s pairs hook)."""


def _string_count(doc: Any) -> int:
    """Strings in a parsed document, member names included."""
    return sum(
        1 if isinstance(node, str) else sum(1 for _ in members) if members is not None else 0
        for node, members in _nodes(doc)
    )


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
    for node, members in _nodes(doc):
        if _is_secret_list_pair(node):
            return None
        if isinstance(node, str):
            count += 1
            if _redact_string(node, key, nested, frozenset()) != node:
                return None
        for name, value in members or ():
            count += 1
            if name in _WATCHED or is_secret_name(name):
                return None
            if _redact_string(name, key, nested, frozenset()) != name:
                return None
            if name.lower() in _PAIR_NAMES and isinstance(value, str) and is_secret_name(value):
                return None  # a name/value pair naming a credential
    return count
