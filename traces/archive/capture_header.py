"""What a capture's archive says of the proxy that wrote it, in its header's ``capture``
map: the one definition of those fields, written by the proxy and read by the
reader's re-ordering, the replayer's upstream guard, the report's shadow tables and
the OTLP export.

Reading takes the header as the reader validated it (``validate.clean_header`` drops
a damaged field), so every field may be absent: each has the value a reader assumes
then. ``read`` gives None for a header with no capture map at all (an import, a
replay's results).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from tailreplay.traces.archive.value_checks import Check, is_str, is_strs, number

__all__ = [
    "CAPTURE_CHECKS",
    "KEY",
    "SHADOW_CHECKS",
    "CaptureHeader",
    "Shadow",
    "raw",
    "shadows_named",
]

KEY = "capture"
"""The header's key of the capture map."""


@dataclass(frozen=True)
class Shadow:
    """``proxy --shadow``: where a share of generating requests was copied."""

    target: str | None = None
    share: float | None = None

    def named(self) -> str:
        """ "TARGET at SHARE%", as a mismatch between files names it."""
        share = f"{self.share * 100:.12g}%" if self.share is not None else "?"
        return f"{self.target} at {share}"


@dataclass(frozen=True)
class CaptureHeader:
    """How the proxy captured: its settings as the archive records them."""

    bodies: str | None = None
    """``--bodies``: which bodies the records keep."""
    sample: float | None = None
    """``--sample``: the share of trace ids recorded (errors and slow ones always)."""
    redact_headers: tuple[str, ...] | None = None
    timeout_s: float | None = None
    """``--timeout``: no exchange lasts longer, which bounds how far out of start order
    a record can be written (``reorder.window_ns``)."""
    shed_after_s: float | None = None
    routes: dict[str, str] | None = None
    """``--route PREFIX=URL``: the upstreams besides the main one."""
    trusted_proxies: tuple[str, ...] | None = None
    listen: tuple[str, int] | None = None
    """The proxy's listener: the ``server.address`` of its spans."""
    otlp_live: bool | None = None
    """Spans were sent while the proxy ran (``traces export otlp`` would send them twice)."""
    shadow: Shadow | None = None

    def to_map(self) -> dict[str, Any]:
        """The ``capture`` map for ``make_header(capture=...)``: msgpack types, absent
        fields left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, Shadow):
                value = {k: v for k, v in vars(value).items() if v is not None}
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> CaptureHeader | None:
        """The capture fields of a (validated) header; None when it has no capture map.
        What is absent or damaged reads as its default."""
        capture = raw(header)
        if capture is None:
            return None
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = capture.get(f.name)
            if value is None or not CAPTURE_CHECKS[f.name][0](value):
                continue
            if f.name == "shadow":
                value = _shadow(value)
            elif f.name in ("redact_headers", "trusted_proxies", "listen"):
                value = tuple(value)
            values[f.name] = value
        return cls(**values)


def raw(header: Mapping[str, Any]) -> dict[str, Any] | None:
    """The header's capture map as it is (to copy into a file made from captures, new
    fields included), None when it has none."""
    capture = header.get(KEY)
    return capture if type(capture) is dict else None


def _shadow(value: dict[str, Any]) -> Shadow:
    kept = {
        k: v for k, (ok, _) in SHADOW_CHECKS.items() if (v := value.get(k)) is not None and ok(v)
    }
    return Shadow(**kept)


def shadows_named(headers: Iterable[Mapping[str, Any]]) -> list[str]:
    """The distinct shadows the captures among ``headers`` copied to, each as
    "TARGET at SHARE%" or "no shadow" (a capture made without ``--shadow``); a header
    that is not a capture's names none. More than one: the files cannot share one
    header's account of their copies."""
    named = set()
    for header in headers:
        capture = CaptureHeader.read(header)
        if capture is not None:
            named.add(capture.shadow.named() if capture.shadow else "no shadow")
    return sorted(named)


def _listen(v: Any) -> bool:
    pair = type(v) is list and len(v) == 2
    return pair and type(v[0]) is str and type(v[1]) is int and 0 <= v[1] < 65536


def _routes(v: Any) -> bool:
    return type(v) is dict and all(type(k) is str and type(u) is str for k, u in v.items())


CAPTURE_CHECKS: dict[str, tuple[Check, str]] = {
    "bodies": (is_str, "a str"),
    "sample": (number(0, 1), "a finite number in 0..1"),
    "redact_headers": (is_strs, "an array of str"),
    "timeout_s": (number(0, 1e9), "a finite number of seconds in 0..1e9"),
    "shed_after_s": (number(0, 1e9), "a finite number of seconds in 0..1e9"),
    "routes": (_routes, "a map of str to str"),
    "trusted_proxies": (is_strs, "an array of str"),
    "listen": (_listen, "[host, port]"),
    "otlp_live": (lambda v: type(v) is bool, "a bool"),
    "shadow": (lambda v: type(v) is dict, "a map"),
}
"""What each field must be; ``validate.header_problems`` names a damaged one."""
SHADOW_CHECKS: dict[str, tuple[Check, str]] = {
    "target": (is_str, "a str"),
    "share": (lambda v: number(0, 1)(v) and v > 0, "a finite number over 0, at most 1"),
}
