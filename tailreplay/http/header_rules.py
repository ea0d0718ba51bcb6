"""The rule for a header the user adds to every request: ``replay --header``, the
``TAILREPLAY_HEADER_*`` variables and ``proxy --shadow-header``.

A name is a token (RFC 9110 §5.6.2) of at most 256 characters; a value is not empty
(most often a variable that was not set: every request would then be answered 401)
and holds no control character (a line break would start a header of its own). The
headers that frame a message (``Host``, ``Content-Length``, ``Transfer-Encoding``,
``Connection`` and the other hop-by-hop ones) are the HTTP client's to write, and
``traceparent`` links each request to its original: a second one of any of them
would make the request malformed or unlinked, so they are refused.

Nothing here echoes a value, nor a name the rule does not know: a credential given
without its colon, or before it, may be all of it.

The header tailreplay adds to a request of its own is here too: ``PROBE_HEADER``, on
the replayer's probe of its target, which the proxy forwards but never records, so a
replay through the proxy captures the replayed traffic and not the check that the
target answers (docs/proxy.md).
"""

from __future__ import annotations

import re

__all__ = ["MAX_NAME", "PROBE_HEADER", "header_problem", "name_problem"]

PROBE_HEADER = "X-Tailreplay-Preflight"
MAX_NAME = 256
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# What the HTTP client writes each of them from.
_FRAMING = {
    "host": "the target's address",
    "content-length": "each request's body",
    "transfer-encoding": "each request's body",
    "expect": "each request's body",
    **dict.fromkeys(
        (
            "connection",
            "keep-alive",
            "proxy-connection",
            "upgrade",
            "te",
            "trailer",
            "http2-settings",
        ),
        "the connection",
    ),
}
_PER_REQUEST = frozenset({"traceparent", "tracestate"})


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a header name, or None when it is."""
    if not _TOKEN.fullmatch(name) or len(name) > MAX_NAME:
        return (
            f"the name is not a header name (letters, digits and !#$%&'*+-.^_`|~, "
            f"at most {MAX_NAME})"
        )
    return None


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be added to every request, or None when it can.

    >>> header_problem("Authorization", "Bearer k") is None
    True
    >>> header_problem("Content-Length", "5")
    "Content-Length is written by the HTTP client for each request's body"
    """
    if (problem := name_problem(name)) is not None:
        return problem
    lower = name.lower()
    if lower in _FRAMING:
        return f"{name} is written by the HTTP client for {_FRAMING[lower]}"
    if lower in _PER_REQUEST:
        return f"{name} is set for each request (it links the request to its original)"
    if lower == PROBE_HEADER.lower():
        # On every request, a proxy in front of the target would record none of them.
        return f"{name} marks tailreplay's own preflight request, which a capture leaves out"
    # The name is not echoed either: a credential typed before a colon would be it.
    if not value:
        return "the value is empty (an unset variable?)"
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value):
        return "the value holds a control character"
    return None
