"""Text from outside — archive strings, a target's error messages, file names — made
safe to show on a terminal, as a Python literal shows it.

A terminal obeys what it prints: ``ESC ] 52`` sets the clipboard, ``ESC [ 2 J``
clears the screen, a carriage return overwrites the line with a fake one, and the
bidirectional overrides reorder what is read. Every control character (C0, DEL,
C1), the line and paragraph separators, the bidirectional controls and lone
surrogates are written escaped instead (``\\x1b``, ``\\r``, ``\\u202e``); all other
text, any script, passes unchanged. Every terminal view of tailreplay shows outside
text through ``printable`` (``report/terminal.py``, the commands' warnings, the
replay's summary and preflight lines, every ``Error:`` line).

>>> printable("ok\\x1b]52;c;aGk=\\x07\\rFAKE")
'ok\\\\x1b]52;c;aGk=\\\\x07\\\\rFAKE'
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escaped(m: re.Match[str]) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal would obey written escaped."""
    return _UNSAFE.sub(_escaped, text)
