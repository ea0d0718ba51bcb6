"""Hypothesis strategies for hostile archives: valid records with hostile values,
damaged headers, random byte damage, huge declared lengths and deep nesting.

Values are drawn per field from the one table every reader checks against
(``traces/archive/validate.py: FIELD_SPECS``): in range, at its edges, or of another type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import zstandard
from hypothesis import strategies as st

from tailreplay.traces.archive.validate import (
    BIN,
    BOOL,
    FIELD_SPECS,
    INT,
    INTS,
    PAIRS,
    STR,
    TARGET,
    TOKEN,
    header_problems,
    record_problem,
)

T0 = 1_700_000_000 * 10**9
HEADER = {"format": "tailreplay", "version": 1, "created_ns": T0, "source": "fuzz"}
NAMES = sorted(FIELD_SPECS)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([-1, 2**32, 2**62, 2**63 - 1, 2**64 - 1]),
    st.floats(),  # NaN and infinities included
    st.text(max_size=4),
    st.binary(max_size=20),
    # What would split or redirect a request line, were it written raw.
    st.sampled_from(
        [
            "/x HTTP/1.1\r\nHost: evil",
            "http://169.254.169.254/",
            "@evil/x",
            "//evil/x",
            "GET\r\n",
            "/a\x00b",
            "/a b",
            "/\x1b[2J",
        ]
    ),
)
hostile = st.one_of(
    scalars,
    st.lists(scalars, max_size=4),
    st.lists(st.lists(scalars, max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=3), scalars, max_size=3),
)


def valid_value(name: str) -> st.SearchStrategy[Any]:
    """Values ``name`` may hold, edges included."""
    kind, lo, hi = FIELD_SPECS[name]
    if kind == INT:
        return st.one_of(st.integers(lo, min(hi - 1, lo + 10**9)), st.sampled_from([lo, hi - 1]))
    if kind == BOOL:
        return st.booleans()
    if kind == STR:
        return st.text(max_size=12)
    if kind == TOKEN:
        return st.from_regex(r"\A[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,8}\Z")
    if kind == TARGET:
        rest = st.text(
            st.characters(
                min_codepoint=0x21, exclude_characters="\x7f", exclude_categories=("Cs",)
            ),
            max_size=12,
        )
        return st.builds(lambda t: "/" + t.lstrip("/"), rest)
    if kind == BIN:
        return st.binary(min_size=hi, max_size=hi) if hi else st.binary(max_size=64)
    if kind == INTS:
        return st.lists(st.integers(lo, hi - 1), max_size=6)
    assert kind == PAIRS
    name = st.from_regex(r"\A:?[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,6}\Z")
    value = st.text(
        st.characters(exclude_characters="\r\n\x00", exclude_categories=("Cs",)), max_size=6
    )
    return st.lists(st.tuples(name, value).map(list), max_size=3)


@st.composite
def record_maps(draw: st.DrawFn, hostile_share: float) -> dict[str, Any]:
    """A record map near T0; each field is valid, or (with ``hostile_share``) anything."""
    m: dict[str, Any] = {"start_ns": T0 + draw(st.integers(0, 10**10))}
    if draw(st.integers(0, 49)) == 0:
        m["start_ns"] = draw(hostile)  # absent, nil, or of another type
    for name in draw(st.lists(st.sampled_from(NAMES), max_size=8, unique=True)):
        bad = draw(st.floats(0, 1)) < hostile_share
        m[name] = draw(hostile) if bad else draw(valid_value(name))
    if draw(st.integers(0, 9)) == 0:
        m["a_future_field"] = draw(hostile)
    return m


@st.composite
def headers(draw: st.DrawFn) -> dict[str, Any]:
    header = dict(HEADER)
    if draw(st.integers(0, 3)) == 0:
        key = draw(st.sampled_from(["capture", "created_ns", "ordered", "source", "upstream"]))
        header[key] = draw(hostile)
    if draw(st.integers(0, 3)) == 0:
        header["capture"] = {
            "timeout_s": draw(st.one_of(st.integers(0, 600), st.floats(), hostile)),
            "bodies": "none",
        }
    return header


@dataclass
class Archive:
    data: bytes
    """The file's bytes (compressed when ``compressed``)."""
    compressed: bool
    damage: str
    """How the bytes were damaged after packing ("" when not at all)."""
    records: int
    """Record maps packed (before any damage)."""
    valid: int
    """Of those, the ones every reader must accept (traces/archive/validate.py)."""
    header_ok: bool
    """The header has no damaged field (else: an error, or read without those fields)."""


def _pack(header: dict[str, Any], maps: list[dict[str, Any]]) -> bytes:
    return msgpack.packb(header) + b"".join(msgpack.packb(m) for m in maps)


_DAMAGE = ["flip", "truncate", "huge_length", "deep", "garbage"]


@st.composite
def archives(draw: st.DrawFn, max_records: int = 20) -> Archive:
    """An archive whose records may hold hostile values and whose bytes may be damaged."""
    header = draw(headers())
    maps = draw(
        st.lists(record_maps(draw(st.sampled_from([0.0, 0.05, 0.3]))), max_size=max_records)
    )
    data = _pack(header, maps)
    damage = draw(st.sampled_from(["", "", *_DAMAGE]))
    data = _damaged(draw, data, damage, len(msgpack.packb(header)))
    valid = sum(1 for m in maps if record_problem(m) is None)
    compressed = draw(st.booleans())
    if compressed:
        data = zstandard.ZstdCompressor().compress(data)
    return Archive(data, compressed, damage, len(maps), valid, not header_problems(header))


def _damaged(draw: st.DrawFn, data: bytes, damage: str, header_len: int) -> bytes:
    if not damage:
        return data
    at = draw(st.integers(0, len(data)))
    if damage == "truncate":
        return data[:at]
    if damage == "flip":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(out) - 1))
            out[i] = draw(st.integers(0, 255))
        return bytes(out)
    if damage == "huge_length":
        # A length prefix claiming far more than the file holds: str32, bin32, array32, map32.
        prefix = draw(st.sampled_from([b"\xdb", b"\xc6", b"\xdd", b"\xdf"]))
        size = draw(st.sampled_from([2**31, 2**32 - 1, 80 << 20, 64 << 20, 2**20 + 1]))
        at = draw(st.integers(header_len, len(data)))
        return data[:at] + prefix + size.to_bytes(4, "big") + data[at:]
    if damage == "deep":
        # Nested arrays, inside a record or in place of one.
        depth = draw(st.integers(30, 3000))
        nested = b"\x91" * depth + b"\x00"
        at = draw(st.integers(header_len, len(data)))
        if draw(st.booleans()):
            nested = b"\x82\xa8start_ns\x01\xa1x" + nested
        return data[:at] + nested + data[at:]
    garbage = draw(st.binary(min_size=1, max_size=64))
    return data[:at] + garbage + data[at:]
