"""Credentials inside encoded runs of text: percent-encoding, base64 and
quoted-printable, decoded where they occur and judged as text; ``\\u`` escapes,
decoded in the whole text when a credential is then found.

A prompt carries a callback URL with ``postgres%3A%2F%2Fuser%3A<pw>%40db``, a
pasted Kubernetes Secret with ``data: {token: c2stcHJvai0uLi4=}``, a log line with
``sk\\u002dproj-…``, an email with ``password=3Dhunter2``: the credential is there,
but no rule sees its shape. Each run of one of these encodings is decoded, and when
the decoded text holds a credential (``judge``), the whole run is masked in the
original text (``masked``); a run that decodes to nothing readable (an image, a
hash, an identifier) is left as it is. Runs longer than ``LONGEST`` are left too:
a credential is short, and a data URL of a megabyte is not worth decoding.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from urllib.parse import unquote_plus

import re2

from tailreplay.traces.text.pattern_set import for_re2

__all__ = ["LONGEST", "mask_encoded"]

LONGEST = 8192
"""Characters of one encoded run decoded at most (a PEM key in base64 is ~2.3 KB)."""

_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_BASE64 = re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/_-]{16,}={0,2}(?![\w+/=-])")
_BASE64_GATE = re2.compile(r"[A-Za-z0-9+/_-]{16}")
"""Whether ``_BASE64`` can match at all: RE2 scans 4 KB of prose in a tenth of the
time Python's engine takes to try ``_BASE64`` at every character, and most text
(prose, code) holds no run of 16."""
_ESCAPE = re.compile(r"\\u([0-9A-Fa-f]{4})")
_QUOTED_PRINTABLE = re.compile(r"=3D")
_RUN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.~+-%")
"""What a percent-encoded or quoted-printable run is made of, around its escapes."""


def _percent(run: str) -> str | None:
    return unquote_plus(run)


def _base64(run: str) -> str | None:
    data = run.rstrip("=")
    if not any(c.isdigit() or c.isupper() for c in data) or (data.isalpha() and data.islower()):
        return None  # a word or an identifier, not base64
    try:
        raw = base64.b64decode(
            data.replace("-", "+").replace("_", "/") + "=" * (-len(data) % 4), validate=True
        )
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    printable = sum(c.isprintable() or c in "\n\r\t" for c in text)
    return text if text and printable == len(text) else None


def _decode_escapes(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m[1], 16)), text)


def _unescaped(text: str, judge: Callable[[str], bool]) -> str:
    """``text`` with its ``\\u`` escapes decoded where that shows a credential: whole
    when it held none before, else line by line."""
    decoded = _decode_escapes(text)
    if decoded == text or not judge(decoded):
        return text
    if not judge(text):
        return decoded
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\\u" in line:
            plain = _decode_escapes(line)
            if judge(plain) and not judge(line):
                lines[i] = plain
    return "\n".join(lines)


def _quoted_printable(run: str) -> str | None:
    return re.sub(r"=([0-9A-F]{2})", lambda m: chr(int(m[1], 16)), run)


_ESCAPED_RUNS: tuple[tuple[str, re.Pattern[str], Callable[[str], str | None]], ...] = (
    ("%", _PERCENT, _percent),
    ("=3D", _QUOTED_PRINTABLE, _quoted_printable),
)


def _runs(text: str, escape: re.Pattern[str]) -> list[tuple[int, int]]:
    """The runs of ``_RUN`` characters holding a match of ``escape``: found from each
    escape outwards (a search for the escape's literal is a memchr; a pattern of the
    whole run would be tried at every character)."""
    runs: list[tuple[int, int]] = []
    for m in escape.finditer(text):
        if runs and m.start() < runs[-1][1]:
            continue
        start, end = m.start(), m.end()
        while start > 0 and text[start - 1] in _RUN:
            start -= 1
        while end < len(text) and text[end] in _RUN:
            end += 1
        runs.append((start, end))
    return runs


def mask_encoded(text: str, judge: Callable[[str], bool], masked: Callable[[str], str]) -> str:
    """``text`` with each encoded run whose decoded text ``judge`` finds a credential in
    replaced by ``masked(run)``. ``\\u`` escapes are decoded in the whole text when
    it then holds a credential (a PEM key escaped a dash at a time spans lines and
    words): what is returned is then the text decoded, for the rules to mask in."""
    if "\\u" in text:
        text = _unescaped(text, judge)
    for gate, escape, decode in _ESCAPED_RUNS:
        if gate in text:
            text = _replaced(text, _runs(text, escape), decode, judge, masked)
    if _BASE64_GATE.search(for_re2(text)) is None:
        return text
    return _BASE64.sub(lambda m: _judged(m[0], _base64, judge, masked), text)


def _replaced(
    text: str,
    runs: list[tuple[int, int]],
    decode: Callable[[str], str | None],
    judge: Callable[[str], bool],
    masked: Callable[[str], str],
) -> str:
    out: list[str] = []
    pos = 0
    for start, end in runs:
        out += [text[pos:start], _judged(text[start:end], decode, judge, masked)]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _judged(
    run: str,
    decode: Callable[[str], str | None],
    judge: Callable[[str], bool],
    masked: Callable[[str], str],
) -> str:
    if len(run) > LONGEST:
        return run
    decoded = decode(run)
    if decoded is None or decoded == run or not judge(decoded):
        return run
    return masked(run)
