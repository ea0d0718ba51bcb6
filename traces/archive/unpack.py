"""The msgpack unpacker every archive reader uses: limited in size and in objects.

A length prefix over a ``format`` limit is rejected before any allocation, and a
record that holds more than ``MAX_RECORD_OBJECTS`` map and array entries stops
being built at that bound (the hooks count them as they are built), so a hostile
file cannot make a reader allocate without bound.
"""

from __future__ import annotations

from typing import Any

import msgpack

from tailreplay.traces.archive import format as fmt

__all__ = ["UNPACK_ERRORS", "ObjectCounter", "TooManyObjects", "declared_keys", "new_unpacker"]

UNPACK_ERRORS = (
    ValueError,  # includes msgpack.FormatError, StackError, ExtraData, size limits
    UnicodeDecodeError,
    TypeError,  # an unhashable map key
)
"""What unpacking damaged bytes raises."""


class TooManyObjects(ValueError):
    """A record holds more maps, arrays and entries than ``MAX_RECORD_OBJECTS``."""


class ObjectCounter:
    """Counts what an unpacker builds for the current object (its hooks see every map
    and array); ``n`` is reset by the caller after each whole object."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def on_list(self, value: list[Any]) -> list[Any]:
        self.n += len(value) + 1
        if self.n > fmt.MAX_RECORD_OBJECTS:
            raise TooManyObjects(f"more than {fmt.MAX_RECORD_OBJECTS:,} objects in one record")
        return value

    def on_map(self, value: dict[str, Any]) -> dict[str, Any]:
        self.n += 2 * len(value) + 1
        if self.n > fmt.MAX_RECORD_OBJECTS:
            raise TooManyObjects(f"more than {fmt.MAX_RECORD_OBJECTS:,} objects in one record")
        return value


def new_unpacker(counter: ObjectCounter) -> msgpack.Unpacker:
    return msgpack.Unpacker(
        raw=False,
        strict_map_key=True,
        max_buffer_size=fmt.MAX_RECORD_BYTES,
        max_str_len=fmt.MAX_STR_LEN,
        max_bin_len=fmt.MAX_BIN_LEN,
        max_array_len=fmt.MAX_ARRAY_LEN,
        max_map_len=fmt.MAX_MAP_LEN,
        max_ext_len=0,
        list_hook=counter.on_list,
        object_hook=counter.on_map,
    )


def declared_keys(buf: bytes | bytearray, i: int) -> int:
    """The number of keys the map header at ``buf[i]`` declares. An unpacked map with
    fewer held a key twice (msgpack keeps the last value): damage, which a reader
    finds by comparing the two."""
    head = buf[i]
    if head < 0x90:  # fixmap
        return head & 0x0F
    if head == 0xDE:  # map 16
        return buf[i + 1] << 8 | buf[i + 2]
    return int.from_bytes(buf[i + 1 : i + 5], "big")  # map 32
