"""Name/value pairs written as a two-item list or tuple in text: code or JSON quoted in
a prompt (``headers = [("Authorization", "…")]``, ``[["X-Api-Token", "…"]]``). The
value is a credential's when the name is (``secret_names.py``), as it would be
under that name in a header or a JSON member."""

from __future__ import annotations

import re
from collections.abc import Callable

import re2

from tailreplay.traces.text.code_values import is_plain_literal
from tailreplay.traces.text.pattern_set import for_re2
from tailreplay.traces.text.secret_names import is_secret_name
from tailreplay.traces.text.secret_values import is_secret_value

__all__ = ["mask_pairs"]

_PAIR = re.compile(
    r"""[\[(]\s*(["'])(?P<name>[\w.-]{1,64})\1\s*,\s*(["'])(?P<value>(?:(?!\3)[^\\\r\n]|\\.){1,512})\3\s*[\])]"""
)

_SPACE = r"[\s\pZ\x0b\x1c-\x1f\x{85}]*"  # what Python's \s takes
_PAIR_GATE = re2.compile(rf"""[\[(]{_SPACE}["'][^"'\r\n]{{1,64}}["']{_SPACE},""")
"""Where a pair can open, searched by RE2 first (``_PAIR``'s back-references are
Python's alone): a tenth of the time Python's engine takes to try ``_PAIR`` at
every bracket of prose and code."""


def mask_pairs(text: str, masked: Callable[[str], str]) -> str:
    """``text`` with the value of each pair naming a credential replaced by
    ``masked(value)`` (its quotes and brackets kept)."""
    if "," not in text or ("(" not in text and "[" not in text):
        return text
    if _PAIR_GATE.search(for_re2(text)) is None:
        return text

    def one(m: re.Match[str]) -> str:
        name, value = m["name"], m["value"]
        if not is_secret_name(name) or is_plain_literal(value):
            return m[0]  # `('SIG_DFL', 'SIG_IGN')`: a constant is no credential
        if not is_secret_value(name, value, quoted=True):
            return m[0]
        start, end = m.start("value") - m.start(), m.end("value") - m.start()
        return m[0][:start] + masked(m["value"]) + m[0][end:]

    return _PAIR.sub(one, text)
