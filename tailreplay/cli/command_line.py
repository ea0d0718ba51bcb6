"""The command line as a result's header keeps it: enough to run it again, with no
credential in it.

The value of every header flag (``--header``, ``--otlp-header``) keeps its name and
loses its value (``Authorization: ***``): that is where a command line carries a
token. Every other argument is shown as a log line shows it: URLs without user,
password or credential parameters (``redact_url``), and anything shaped like a
credential masked (``redact_text``'s detectors). Paths and numbers stay.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tailreplay.traces.text.redact import redact_text
from tailreplay.traces.text.redact_targets import redact_url

__all__ = ["shown_command"]

_HEADER_FLAGS = ("--header", "--otlp-header", "--shadow-header", "-H")
_KEY = b"command line"
"""Fingerprints in a command line are for telling values apart, not for joining."""


def shown_command(argv: Sequence[str]) -> tuple[str, ...]:
    """``argv`` with its program's base name and every credential masked."""
    if not argv:
        return ()
    out = [os.path.basename(argv[0])]
    masked_next = False
    for arg in argv[1:]:
        if masked_next:
            out.append(_header(arg))
            masked_next = False
            continue
        flag, eq, value = arg.partition("=")
        if flag in _HEADER_FLAGS:
            if eq:
                out.append(f"{flag}={_header(value)}")
            else:
                out.append(arg)
                masked_next = True
            continue
        out.append(_argument(arg))
    return tuple(out)


def _header(value: str) -> str:
    """``Name: value`` (or ``name=value``, as OTLP headers are given) without its value."""
    name, colon, _ = value.partition(":")
    if colon:
        return f"{name.strip()}: ***"
    name, eq, _ = value.partition("=")
    return f"{name.strip()}=***" if eq else "***"


def _argument(arg: str) -> str:
    if "://" in arg:
        flag, eq, url = arg.rpartition("=") if arg.startswith("-") else ("", "", arg)
        return f"{flag}{eq}{redact_url(url)}"
    return redact_text(arg, _KEY)
