"""Finding the next record in damaged bytes: where ``--skip-corrupt`` goes on reading.

Only bytes that can start a record are tried: a map header (fixmap of 1..15 keys,
map16, map32) followed by the first byte of a str or bin key, found by a regex at C
speed; then a look at the header's key count; then an unpack of the bytes there,
which must give a valid record (``traces/archive/validate.py``) with no key twice.
"""

from __future__ import annotations

import re

import msgpack

from tailreplay.traces.archive import format as fmt
from tailreplay.traces.archive.unpack import (
    UNPACK_ERRORS,
    ObjectCounter,
    declared_keys,
    new_unpacker,
)
from tailreplay.traces.archive.validate import record_problem

__all__ = ["RECORD_START", "probe", "record_follows"]

_KEY_STARTS = frozenset([*range(0xA0, 0xC0), 0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB])  # str, bin
_KEY = rb"[\xa0-\xbf\xc4-\xc6\xd9-\xdb]"
RECORD_START = re.compile(
    rb"[\x81-\x8f]" + _KEY + rb"|\xde[\x00-\xff]{2}" + _KEY + rb"|\xdf[\x00-\xff]{4}" + _KEY
)
"""Where a record can start (a map header that may run to 5 bytes, then a key byte)."""


def record_follows(buf: bytearray) -> bool:
    """Does a valid record start in ``buf`` after its first byte? (No more bytes will come.)"""
    return any(probe(buf, m.start(), True) for m in RECORD_START.finditer(buf, 1))


def _could_start_record(buf: bytearray, i: int) -> bool:
    """A quick look at the map header at ``buf[i]``: a record has 1..MAX_MAP_LEN keys."""
    head = buf[i]
    if head <= 0x8F:
        n, key = head & 0x0F, i + 1
    else:
        size = 2 if head == 0xDE else 4
        n, key = int.from_bytes(buf[i + 1 : i + 1 + size], "big"), i + 1 + size
        if key > len(buf):
            return True  # not enough bytes to tell: the probe will ask for more
    if not 0 < n <= fmt.MAX_MAP_LEN:
        return False
    return key >= len(buf) or buf[key] in _KEY_STARTS


def probe(buf: bytearray, i: int, eof: bool) -> bool | None:
    """Does a valid record start at ``buf[i]``? None when more bytes are needed to tell."""
    if not _could_start_record(buf, i):
        return False
    window = 512  # most candidates in damage fail within a few bytes
    while True:
        unpacker = new_unpacker(ObjectCounter())
        with memoryview(buf) as view, view[i : i + window] as part:
            unpacker.feed(part)
        try:
            obj = unpacker.unpack()
            return record_problem(obj) is None and len(obj) == declared_keys(buf, i)
        except msgpack.OutOfData:
            if i + window < len(buf) and window < fmt.MAX_RECORD_BYTES:
                window *= 16
                continue
            if eof or window >= fmt.MAX_RECORD_BYTES:
                return False
            return None
        except UNPACK_ERRORS:
            return False
