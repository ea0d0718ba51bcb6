"""The checks a version-2 archive carries: the header check and one marker per batch.

docs/archive-format.md ("Checksums") is the normative layout; this module is its
code, shared by the writer and the reader. Both are msgpack ext objects, so a plain
msgpack reader streams past them (it gets an ``ExtType`` it can drop):

- the header check, right after the header: fixext 8 of type ``HEADER_CHECK``,
  the XXH3-64 of the header's bytes;
- a batch marker before every batch of records: ext 8 of 20 bytes of type
  ``BATCH``: the batch's length in bytes, its record count, the XXH3-64 of its
  bytes, and the low 32 bits of the XXH3-64 of the marker's first 19 bytes (so a
  damaged length is never taken for a file that ends early).

A compressed file holds each batch (and the header with its check) as one zstd frame
with zstd's content checksum, preceded by a frame check: a skippable frame holding the
compressed frame's length and XXH3-64, so damage that decodes to the same bytes (a
window size, a bit no decoder reads) is damage too, and a damaged length is never
taken for a torn tail.

XXH3-64 runs at ~20 GB/s, so checking costs a reader next to nothing (CRC-32 at
~1.7 GB/s would slow the column scanner, which reads 2 GB/s of records with bodies).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

from tailreplay.traces.archive.format import MAX_RECORD_BYTES

__all__ = [
    "BATCH",
    "BATCH_BYTES",
    "FRAME_CHECK_MAGIC",
    "FRAME_CHECK_SIZE",
    "HEADER_CHECK",
    "HEADER_CHECK_SIZE",
    "MARKER_SIZE",
    "Marker",
    "batch_marker",
    "checked_batch",
    "frame_check",
    "hash64",
    "header_check",
    "read_frame_check",
    "read_marker",
    "split_batches",
]

HEADER_CHECK = 0x68  # "h"
BATCH = 0x62  # "b"
HEADER_CHECK_SIZE = 10
MARKER_SIZE = 23
FRAME_CHECK_MAGIC = bytes([0x5B, 0x2A, 0x4D, 0x18])
"""A skippable zstd frame (RFC 8878: 0x184D2A5B, little-endian) holding a frame check."""
FRAME_CHECK_HEAD = FRAME_CHECK_MAGIC + (16).to_bytes(4, "little")
FRAME_CHECK_SIZE = 24
BATCH_BYTES = 8 << 20
"""Most bytes of records in one batch, unless it holds one record (up to
``MAX_RECORD_BYTES``): what a reader holds back until the batch is checked."""

_HEAD = bytes([0xD7, HEADER_CHECK])
MARKER_HEAD = bytes([0xC7, 20, BATCH])
_MARKER = struct.Struct(">3sIIQI")
_MARKER_BODY = 19  # the bytes the marker's own check covers

hash64 = xxhash.xxh3_64_intdigest


def header_check(header: bytes) -> bytes:
    """The 10 bytes that follow a version-2 header's ``header`` bytes."""
    return _HEAD + hash64(header).to_bytes(8, "big")


def header_check_ok(header: bytes, check: bytes) -> bool:
    return check == header_check(header)


def batch_marker(batch: bytes, records: int) -> bytes:
    """The 23 bytes that go before ``batch`` (the packed bytes of ``records`` records)."""
    body = _MARKER.pack(MARKER_HEAD, len(batch), records, hash64(batch), 0)[:_MARKER_BODY]
    return body + (hash64(body) & 0xFFFFFFFF).to_bytes(4, "big")


@dataclass(frozen=True)
class Marker:
    length: int
    records: int
    digest: int

    def matches(self, batch: bytes | memoryview) -> bool:
        return hash64(batch) == self.digest


def read_marker(data: bytes | bytearray | memoryview) -> Marker | str:
    """The marker in the 23 bytes ``data``, or why they are none."""
    head, length, records, digest, check = _MARKER.unpack(data)
    if head != MARKER_HEAD:
        return "no batch marker"
    if hash64(bytes(data[:_MARKER_BODY])) & 0xFFFFFFFF != check:
        return "a damaged batch marker"
    if length > max(BATCH_BYTES, MAX_RECORD_BYTES):
        return f"a batch marker announcing {length:,} bytes, more than a batch holds"
    return Marker(length, records, digest)


def split_batches(records: list[bytes], size: int) -> list[list[bytes]]:
    """The packed ``records`` (``size`` bytes in all) cut into batches of at most
    ``BATCH_BYTES``, a larger record alone in its batch."""
    if size <= BATCH_BYTES:
        return [records]
    batches: list[list[bytes]] = []
    batch: list[bytes] = []
    held = 0
    for data in records:
        if batch and held + len(data) > BATCH_BYTES:
            batches.append(batch)
            batch, held = [], 0
        batch.append(data)
        held += len(data)
    if batch:
        batches.append(batch)
    return batches


def checked_batch(records: list[bytes]) -> bytes:
    """One batch as written: its marker, then the packed ``records``."""
    data = b"".join(records)
    return batch_marker(data, len(records)) + data


def frame_check(frame: bytes) -> bytes:
    """The skippable zstd frame written before the compressed ``frame`` (24 bytes)."""
    body = FRAME_CHECK_HEAD + len(frame).to_bytes(4, "big") + hash64(frame).to_bytes(8, "big")
    return body + (hash64(body) & 0xFFFFFFFF).to_bytes(4, "big")


def read_frame_check(data: bytes) -> tuple[int, int] | str:
    """(length, digest) of the zstd frame the 24-byte frame check ``data`` is of, or
    why it is none."""
    if len(data) < FRAME_CHECK_SIZE or data[:8] != FRAME_CHECK_HEAD:
        return "a damaged zstd frame check"
    if hash64(data[:20]) & 0xFFFFFFFF != int.from_bytes(data[20:24], "big"):
        return "a damaged zstd frame check"
    return int.from_bytes(data[8:12], "big"), int.from_bytes(data[12:20], "big")
