"""Parsing and formatting of the units users type: durations, sizes, times.

Every parser raises ``UsageError`` with the offending text, so a wrong flag value
becomes one line and exit 2.
"""

from __future__ import annotations

import itertools
import math
import re
from datetime import UTC, datetime
from urllib.parse import urlsplit

from yarl import URL

from tailreplay.errors import UsageError

__all__ = [
    "CLOCK_END_NS",
    "ascii_digits",
    "format_duration",
    "format_ns",
    "host_port",
    "parse_buckets",
    "parse_duration",
    "parse_factor",
    "parse_host_port",
    "parse_http_url",
    "parse_size",
    "parse_time",
    "port_problem",
    "round_factor",
]

_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s|m|h|d)")
_FACTOR_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(x|%)?\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``30s``, ``10m``, ``1h30m``, ``250ms``, or a bare number of seconds.

    >>> parse_duration("1h30m")
    5400.0
    """
    s = text.strip().lower()
    try:
        value = float(s)
    except ValueError:
        pass
    else:
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"invalid duration {text!r}: must be a finite, non-negative number")
        return value
    pos, total = 0, 0.0
    for m in _DURATION_RE.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise UsageError(f"invalid duration {text!r}: use e.g. 30s, 10m, 1h30m, 250ms")
    if not math.isfinite(total):
        raise UsageError(f"invalid duration {text!r}: must be finite")
    return total


def parse_factor(
    text: str, flag: str, *, shown: str | None = None, forms: str = "2x, 200% or 0.5x"
) -> float:
    """A positive factor in ``text``: ``2x``, ``200%``, ``0.5x`` or a bare ``1.5``.

    Errors name ``flag`` and ``shown`` (default ``text``) and suggest ``forms``.

    >>> parse_factor("150%", "--amplify")
    1.5
    """
    m = _FACTOR_RE.match(text)
    shown = text if shown is None else shown
    if not m:
        raise UsageError(f"invalid {flag} {shown!r}: use e.g. {forms}")
    value = float(m.group(1)) / (100.0 if (m.group(2) or "").lower() == "%" else 1.0)
    if value <= 0:
        raise UsageError(f"invalid {flag} {shown!r}: the factor must be positive")
    return value


def parse_size(text: str) -> int:
    """Bytes in ``text``: ``256MiB``, ``1GB``, ``4096``.

    >>> parse_size("256MiB")
    268435456
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise UsageError(f"invalid size {text!r}: use e.g. 256MiB, 1GB, 4096")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


CLOCK_END_NS = 1 << 62
"""Where the archive's clock ends: 2^62 ns after 1970 is early 2116, and a time plus a
duration below it fits an int64."""


def parse_time(text: str, *, origin_ns: int | None = None) -> int:
    """Unix ns for ``text``, from 1970 to early 2116 (``CLOCK_END_NS``).

    Accepts ISO-8601 (``2023-11-16T18:30:00Z``; no zone means UTC), unix seconds
    (``1700158200.5``), or ``+DURATION`` relative to ``origin_ns`` (the first record).
    """
    s = text.strip()
    if s.startswith("+"):
        if origin_ns is None:
            raise UsageError(f"relative time {text!r} needs an archive to be relative to")
        # In whole ns: a unix time in float ns would lose its last 8 bits.
        offset = _on_the_clock(parse_duration(s[1:]) * 1e9, text)
        return _on_the_clock(origin_ns + offset, text)
    try:
        seconds = float(s)
    except ValueError:
        seconds = None
    if seconds is not None:
        return _on_the_clock(seconds * 1e9, text)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"invalid time {text!r}: use ISO-8601 (2023-11-16T18:30:00Z), "
            "unix seconds, or +DURATION from the first record"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return _on_the_clock(int(dt.timestamp()) * 10**9 + dt.microsecond * 1000, text)


def _on_the_clock(ns: float, text: str) -> int:
    """``ns`` as a whole number, refused outside the archive's clock (nan and inf
    included)."""
    if not 0 <= ns < CLOCK_END_NS:  # False for nan
        raise UsageError(f"invalid time {text!r}: must be between 1970 and 2116")
    return ns if isinstance(ns, int) else round(ns)


def format_duration(seconds: float) -> str:
    """``seconds`` as a user would type it: ``1h30m``, ``5m``, ``90s``, ``250ms``.

    >>> format_duration(5400.0)
    '1h30m'
    """
    if seconds < 1 or seconds != int(seconds):
        return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"
    rest, parts = int(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)


def format_ns(ns: int) -> str:
    """ISO-8601 UTC with milliseconds: ``2023-11-16T18:15:46.684Z``."""
    dt = datetime.fromtimestamp(ns // 10**9, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(ns // 10**6) % 1000:03d}Z"


def host_port(host: str, port: int) -> str:
    """``host:port`` as a URL or a flag writes it: an IPv6 literal in brackets
    (``[::1]:8000``), so a printed address can be pasted back."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_host_port(text: str, flag: str) -> tuple[str, int]:
    """``127.0.0.1:8000`` (or ``[::1]:8000``) → (host, port); port 0 means any free port."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not ascii_digits(port) or int(port) > 65535:
        raise UsageError(f"invalid {flag} {text!r}: use HOST:PORT, e.g. 127.0.0.1:8000")
    return host.strip("[]"), int(port)


def parse_http_url(text: str, flag: str) -> URL:
    """An http(s) base URL with a host: ``http://127.0.0.1:8000``, ``https://api.example/v2``."""
    try:
        url = URL(text)
    except ValueError:
        url = None
    shown = re.sub(r"//[^/?#]*@", "//***@", text, count=1)  # never echo a password
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"invalid {flag} {shown!r}: use http(s)://HOST[:PORT][/PATH]")
    problem = port_problem(text, url)
    if problem is not None:
        raise UsageError(f"invalid {flag} {shown!r}: {problem}")
    return url


def port_problem(text: str, url: URL) -> str | None:
    """Why the port of ``url`` (parsed from ``text``) cannot be connected to, or None:
    port 0, or a port written other than in 0-9 (yarl reads ``+80`` as 80)."""
    port = _port_text(text)
    if port and not ascii_digits(port):
        return "the port must be digits 0-9 (1-65535)"
    if url.explicit_port == 0:
        return "port 0 cannot be connected to"
    return None


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is a number written in 0-9 alone. ``str.isdigit`` and ``int()``
    take more ("٨٠", "+80", " 80", "1_000"): a port, count or edge read from text the
    user did not write as a plain number."""
    return text.isascii() and text.isdigit()


def _port_text(url: str) -> str | None:
    """The port as ``url`` writes it in its authority ("" for ``host:``), None for none."""
    authority = urlsplit(url).netloc.rpartition("@")[2]
    colon = authority.rfind(":")
    return authority[colon + 1 :] if colon > authority.rfind("]") else None


def parse_buckets(text: str) -> list[int]:
    """Input-token bucket edges: ``50,256,512`` → [50, 256, 512] (positive integers)."""
    parts = [x.strip() for x in text.split(",") if x.strip()]
    if not all(ascii_digits(x) for x in parts):
        raise UsageError(f"invalid --buckets {text!r}: use e.g. 50,256,512,1024")
    edges = [int(x) for x in parts]
    if not edges:
        raise UsageError(f"invalid --buckets {text!r}: no edge; use e.g. 50,256,512,1024")
    if any(not 0 < e < 2**32 for e in edges):
        raise UsageError("--buckets edges must be positive token counts (under 2^32)")
    if any(a >= b for a, b in itertools.pairwise(edges)):
        raise UsageError(f"--buckets edges must ascend, each once: {text!r}")
    return edges


def round_factor(factor: float, precision: float, *, down: bool = False) -> float:
    """``factor`` to as few significant digits as keep it within a quarter of
    ``precision`` (3 at the default 5%): a trial's factor reads the same in its line,
    its replay's header, its file name and the answer (0.889x, never 0.888603x).
    ``down``: never above ``factor`` (a step that must stay within the precision)."""
    digits = max(2, math.ceil(1 - math.log10(max(precision, 1e-9) / 4)))
    nearest = float(f"{factor:.{digits}g}")
    if not down or nearest <= factor:
        return nearest
    unit = 10 ** (math.floor(math.log10(factor)) - digits + 1)
    return float(f"{nearest - unit:.{digits}g}")
