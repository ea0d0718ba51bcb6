"""Hypothesis strategies for hostile archives: valid records with hostile values,
damaged headers, random byte damage, huge declared lengths and deep nesting; for
compressed archives, frames laid out as the writer lays them out (or split anywhere),
then damaged as zstd data: flipped bytes, truncation, garbage after or between frames,
skippable frames, more frames, frames asking for a huge window, and bombs.

Values are drawn per field from the one table every reader checks against
(``traces/archive/validate.py: FIELD_SPECS``): in range, at its edges, or of another type.
"""

from __future__ import annotations

import io
import random
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
    if draw(st.integers(0, 5)) == 0:
        header["ordered"] = True  # a promise the records (in random order) may break
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
    """How the bytes were damaged after packing ("" when not at all); for compressed
    archives, then how the zstd data was ("flip+zgarbage")."""
    records: int
    """Record maps packed (before any damage)."""
    valid: int
    """Of those, the ones every reader must accept (traces/archive/validate.py)."""
    header_ok: bool
    """The header has no damaged field (else: an error, or read without those fields)."""
    mutation: str = ""
    """Every mutation made, for a table: "plain: flip", "zstd: truncate+zflip", "zstd: -"."""


def _pack(header: dict[str, Any], maps: list[dict[str, Any]]) -> bytes:
    return msgpack.packb(header) + b"".join(msgpack.packb(m) for m in maps)


_DAMAGE = ["flip", "truncate", "huge_length", "deep", "garbage"]
_ZSTD_DAMAGE = [
    "zflip",
    "ztruncate",
    "zgarbage",
    "zbetween",
    "zwindow",
    "bomb_zeros",
    "bomb_records",
]
# The same, but no damage: the verdict stays known in advance.
_ZSTD_LAYOUT = ["zskippable", "zmore"]


@st.composite
def archives(draw: st.DrawFn, max_records: int = 20) -> Archive:
    """An archive whose records may hold hostile values and whose bytes may be damaged."""
    header = draw(headers())
    maps = draw(
        st.lists(record_maps(draw(st.sampled_from([0.0, 0.05, 0.3]))), max_size=max_records)
    )
    data = _pack(header, maps)
    # Two in three compressed; then mostly damaged as zstd data, sometimes before too.
    # The kinds are drawn evenly (hypothesis's own draws favour the first choices).
    # Seeded by what was drawn so far too: archives hypothesis draws alike still differ.
    rng = random.Random(data + draw(st.binary(min_size=8, max_size=8)))
    compressed = rng.random() < 2 / 3
    damage = ""
    if not compressed or rng.random() < 0.25:
        damage = rng.choice([*_DAMAGE, "", ""])
    cuts = _record_ends(header, maps) if not damage else None
    data = _damaged(draw, data, damage, len(msgpack.packb(header)))
    archive = Archive(data, False, damage, len(maps), 0, not header_problems(header))
    archive.mutation = f"plain: {damage or '-'}"
    if compressed:
        archive.compressed = True
        archive.data = _frames(draw, data, cuts)
        kind = rng.choice([*_ZSTD_DAMAGE, *_ZSTD_LAYOUT, ""])
        if kind == "bomb_records" and rng.random() < 0.15:
            kind = "bomb_tiny"  # 11-byte records: rarer, each costs seconds a command
        if kind in _ZSTD_LAYOUT:
            maps = maps + _relaid(draw, archive, kind)
        elif kind:
            archive.data = _zstd_damaged(draw, archive.data, kind)
            archive.damage = "+".join(filter(None, [damage, kind]))
        archive.mutation = f"zstd: {'+'.join(filter(None, [damage, kind])) or '-'}"
    archive.records = len(maps)
    archive.valid = sum(1 for m in maps if record_problem(m) is None)
    return archive


def _record_ends(header: dict[str, Any], maps: list[dict[str, Any]]) -> list[int]:
    """The byte offsets where the header and each record end."""
    ends = [len(msgpack.packb(header))]
    for m in maps:
        ends.append(ends[-1] + len(msgpack.packb(m)))
    return ends


_BLOCK = zstandard.FLUSH_BLOCK
_FRAME = zstandard.FLUSH_FRAME


def _frames(draw: st.DrawFn, data: bytes, cuts: list[int] | None) -> bytes:
    """``data`` compressed in frames and blocks: cut at record ends as the writer cuts
    (``cuts``), or anywhere (another tool's frames, or bytes damaged before)."""
    points = cuts[:-1] if cuts else list(range(1, len(data)))
    chosen = sorted(set(draw(st.lists(st.sampled_from(points), max_size=6)))) if points else []
    out = io.BytesIO()
    level = draw(st.sampled_from([1, 3, 19]))
    writer = zstandard.ZstdCompressor(level=level, write_checksum=draw(st.booleans()))
    z = writer.stream_writer(out, closefd=False)
    at = 0
    for cut in [*chosen, len(data)]:
        z.write(data[at:cut])
        z.flush(_FRAME if cut == len(data) or draw(st.booleans()) else _BLOCK)
        at = cut
    return out.getvalue()


def _relaid(draw: st.DrawFn, archive: Archive, kind: str) -> list[dict[str, Any]]:
    """Frames that are no damage: skippable ones anywhere a frame may start, or one
    more frame of records. Returns the records added."""
    if kind == "zskippable":
        payload = draw(st.binary(max_size=40))
        skippable = (0x184D2A50 + draw(st.integers(0, 15))).to_bytes(4, "little")
        skippable += len(payload).to_bytes(4, "little") + payload
        where = draw(st.sampled_from([0, len(archive.data)]))
        archive.data = archive.data[:where] + skippable + archive.data[where:]
        return []
    more = draw(st.lists(record_maps(0.0), min_size=1, max_size=5))
    archive.data += zstandard.ZstdCompressor().compress(b"".join(map(msgpack.packb, more)))
    return more


def _zstd_damaged(draw: st.DrawFn, data: bytes, kind: str) -> bytes:
    if kind == "zflip":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out)
    if kind == "ztruncate":
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "zgarbage":
        return data + draw(st.binary(min_size=1, max_size=64))
    if kind == "zbetween":  # garbage, then a frame: damage in the middle
        more = zstandard.ZstdCompressor().compress(msgpack.packb({"start_ns": T0}))
        return data + draw(st.binary(min_size=1, max_size=64)) + more
    if kind == "zwindow":  # a frame header asking for a 2**(10 + e) byte window
        exponent = draw(st.integers(16, 31))
        return data + b"\x28\xb5\x2f\xfd\x00" + bytes([exponent << 3]) + b"\x01\x00\x00"
    return data + _bomb(draw, kind)


def _bomb(draw: st.DrawFn, kind: str) -> bytes:
    """Frames that decompress far past 1,000x their size."""
    if kind == "bomb_zeros":  # up to 4 GiB of zeros in RLE blocks of 4 bytes
        rle = (2 | (128 << 10 << 3)).to_bytes(3, "little") + b"\x00"
        blocks = draw(st.sampled_from([1 << 10, 1 << 12, 1 << 15]))
        head = b"\x28\xb5\x2f\xfd\x00" + bytes([7 << 3])  # a 128 KiB window
        return head + rle * (blocks - 1) + (3 | (128 << 10 << 3)).to_bytes(3, "little") + b"\0"
    if kind == "bomb_records":  # a record of a few hundred bytes, repeated
        record = msgpack.packb({"start_ns": T0, "path": "/" + "a" * draw(st.integers(100, 900))})
    else:  # 11-byte records: the most records per byte
        record = msgpack.packb({"start_ns": 1})
    frame = _BOMB_FRAMES.get(record)
    if frame is None:
        frame = _BOMB_FRAMES[record] = zstandard.ZstdCompressor().compress(
            record * ((8 << 20) // len(record))
        )
    return frame * draw(st.integers(1, 3))


_BOMB_FRAMES: dict[bytes, bytes] = {}


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
