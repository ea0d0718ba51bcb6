"""Dot-segments in a request's path, resolved as RFC 3986 §5.2.4 says, so that no
request leaves the upstream's base path.

The proxy appends a request's path to its upstream's (``--upstream
http://h/tenantA``): ``/../tenantB/api/generate`` would reach
``/tenantA/../tenantB/...``, which the upstream resolves to another tenant's path.
A ``..`` is one whatever its spelling: ``%2e%2e``, ``%2E.``, and segments cut by an
encoded slash (``..%2f``), which servers disagree about. So a path is resolved under
every reading a server may take — ``%2F`` and ``\\`` (``%5C``) as slashes or as
characters, ``;params`` cut from a segment (as Tomcat and Spring do) or kept, runs of
slashes merged into one (nginx's ``merge_slashes``, on by default, so that
``//..`` climbs) or kept as empty segments (RFC 3986) — and
refused when, under any of them, a ``..`` climbs above the path's root (where the
upstream's base path ends): that is the only way out of it, since everything else in
the path is appended below the base. Under every reading the resolved path is also
what routes (``--route``) are matched on.

Nothing is rewritten: a path that stays is forwarded byte for byte as it came.
"""

from __future__ import annotations

import re
from itertools import product

__all__ = ["PATH_OUTSIDE", "resolutions"]

PATH_OUTSIDE = "path_outside_base"
"""The record's ``error`` for a request refused because its path leaves the base."""

_DOT = re.compile(r"%2e", re.IGNORECASE)
_ENCODED_SLASH = re.compile(r"%2f", re.IGNORECASE)
_BACKSLASH = re.compile(r"%5c|\\", re.IGNORECASE)
_SLASHES = re.compile(r"//+")

# (encoded slash is a slash, backslash is a slash, ;params are cut, slashes merged)
# for every reading.
_READINGS = tuple(product((False, True), repeat=4))


def _may_hold_dots(path: str) -> bool:
    """Whether a path can hold a dot-segment at all: nearly every API path (no ``.``,
    no ``%``) is answered without splitting it."""
    return "." in path or "%" in path


def _resolve(path: str, slash: bool, backslash: bool, params: bool, merge: bool) -> str | None:
    """``path`` with its dot-segments removed under one reading, or None when a ``..``
    climbs above its root."""
    if slash:
        path = _ENCODED_SLASH.sub("/", path)
    if backslash:
        path = _BACKSLASH.sub("/", path)
    if merge:
        path = _SLASHES.sub("/", path)
    out: list[str] = []
    segments = path.split("/")[1:]  # the path starts with "/"
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        name = segment.split(";", 1)[0] if params else segment
        dots = _DOT.sub(".", name) if "%" in name else name
        if dots == ".":
            if i == last:
                out.append("")  # "/a/." is "/a/"
            continue
        if dots == "..":
            if not out:
                return None
            out.pop()
            if i == last:
                out.append("")  # "/a/b/.." is "/a/"
            continue
        out.append(segment)
    return "/" + "/".join(out)


def resolutions(path: str) -> set[str] | None:
    """The path (no query) as every reading resolves it; None when one leaves its root.

    >>> resolutions("/api/generate")
    {'/api/generate'}
    >>> resolutions("/v1/%2e%2e/%2E./x") is None
    True
    >>> sorted(resolutions("/v1/x/../models"))
    ['/v1/models']
    """
    if not _may_hold_dots(path):
        return {path}
    out = set()
    for reading in _READINGS:
        resolved = _resolve(path, *reading)
        if resolved is None:
            return None
        out.add(resolved)
    return out
