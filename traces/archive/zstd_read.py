"""A ``.msgpack.zst`` archive decompressed frame by frame, every good block kept, and
bounded in memory, time and output.

The zstd frame structure is read here (magic, frame header, 3-byte block headers,
checksum, skippable frames: RFC 8878), so the reader knows where each frame and block
starts and whether the last one is whole; libzstd decodes the blocks. A frame the
writer put a frame check before (``traces/archive/checksums.py``) is held to it before
it is decoded. Decoding is fed
a few blocks at a time, at most ``_BATCH_OUT`` bytes of output, so one call can never
expand without bound, and a block that fails is found by decoding its batch again a
block at a time: the output of every good block before it is kept. A stream damaged
in this way stops with a ``StreamDamage`` telling the scan what happened; the scan
(``traces/archive/scan.py``) reports it as it reports damage in a plain file, and with
``--skip-corrupt`` calls ``resume()`` to go on at the next frame.

Bounds, the same for every reader (``open_chunks`` is the one door):

- ``MAX_RATIO``: output may not run past 1,000 times the compressed bytes read so far
  (plus ``RATIO_SLACK``, 1 MiB). Real captures compress about 4.6x; the writer
  starts a new frame every 4 MiB of records, each with an empty history, so even one
  prompt repeated in full bodies stays within a few hundred times. A compression
  bomb (records of a few bytes repeated, a tail of zeros) runs at 5,000-30,000x and
  is stopped soon after its first ``RATIO_SLACK`` bytes.
- ``budget``: at most ``DEFAULT_BUDGET`` (64 GiB, 256 times the proxy's default
  rotation size) of output per file, ``TAILREPLAY_ZSTD_BUDGET`` to change it.
- ``MAX_WINDOW``: a frame may ask for at most a 32 MiB window (what libzstd allocates
  to decode it): the writer's level 3 uses 2 MiB, the ``zstd`` tool's levels 1-19
  at most 8 MiB.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import zstandard

from tailreplay.errors import UsageError
from tailreplay.traces.archive.checksums import (
    FRAME_CHECK_MAGIC,
    FRAME_CHECK_SIZE,
    hash64,
    read_frame_check,
)
from tailreplay.units import parse_size

__all__ = [
    "BUDGET_ENV",
    "MAX_RATIO",
    "ZSTD_MAGIC",
    "Chunk",
    "ChunkStream",
    "StreamDamage",
    "ZstdChunks",
    "decompress_budget",
    "is_zstd",
]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SKIPPABLE = re.compile(rb"[\x50-\x5f]\x2a\x4d\x18")
_FRAME_START = re.compile(rb"\x28\xb5\x2f\xfd|[\x50-\x5f]\x2a\x4d\x18")
MAX_WINDOW = 32 << 20
MAX_RATIO = 1000
RATIO_SLACK = 1 << 20
"""Output allowed beyond the ratio: a first record of up to 1 MiB of anything, however
repetitive, still reads. A bomb of 11-byte records after a few records is stopped
within ~300,000 of them (a few seconds of any command)."""
DEFAULT_BUDGET = 64 << 30
BUDGET_ENV = "TAILREPLAY_ZSTD_BUDGET"
_BLOCK_MAX = 128 << 10  # a block never decodes to more (RFC 8878, Block_Maximum_Size)
_BATCH_OUT = 1 << 20  # most output one call to libzstd may make
_READ = 1 << 20
_TOOL = "`zstd -d` it to read it anyway"


def is_zstd(magic: bytes) -> bool:
    """Whether a file starting with ``magic`` (4 bytes) is a zstd stream."""
    return _FRAME_START.fullmatch(magic) is not None


def decompress_budget() -> int:
    """Decompressed bytes one file may hold: ``TAILREPLAY_ZSTD_BUDGET`` or 64 GiB."""
    text = os.environ.get(BUDGET_ENV, "").strip()
    if not text:
        return DEFAULT_BUDGET
    try:
        budget = parse_size(text)
    except UsageError:
        raise UsageError(f"{BUDGET_ENV}={text!r}: not a size (use e.g. 100GiB)") from None
    if budget <= 0:
        raise UsageError(f"{BUDGET_ENV}={text!r}: must be more than 0 bytes")
    return budget


@dataclass(frozen=True)
class StreamDamage:
    """Why a stream of chunks stopped before its end."""

    reason: str
    torn: bool
    """The file just ends (a frame cut short, or bytes after the last frame that are
    no frame): what a crash leaves, a torn tail. Otherwise the bytes are damaged."""


Chunk = bytes | bytearray | memoryview
"""A piece of a file's bytes: a view of what a stream read, or a copy."""


class ChunkStream(Iterator[Chunk]):
    """A file's bytes in chunks. A plain file's end is its end; a compressed one may
    stop at damage (``damage``) and go on after it (``resume``)."""

    damage: StreamDamage | None = None

    def __init__(self, f: BinaryIO, chunk_size: int) -> None:
        self._f = f
        self._chunk_size = chunk_size

    def __next__(self) -> Chunk:
        chunk = b"" if self._f.closed else self._f.read(self._chunk_size)
        if not chunk:
            self._f.close()
            raise StopIteration
        return chunk

    def resume(self) -> bool:
        """After damage: go on at the next frame; False when there is none."""
        return False

    def file_offset(self, offset: int) -> int:
        """Where the stream's byte ``offset`` is in the file (decompressed, for ``.zst``)."""
        return offset

    def close(self) -> None:
        """Let go of the file (reading ends early, or a header was all that was asked)."""
        self._f.close()


class _Stop(Exception):
    """Decoding cannot go on here; ``search_from``: where to look for a next frame."""

    def __init__(self, reason: str, *, torn: bool = False, search_from: int | None = None) -> None:
        super().__init__(reason)
        self.damage = StreamDamage(reason, torn)
        self.search_from = search_from


@dataclass(frozen=True)
class _Block:
    at: int
    end: int
    most_out: int
    last: bool


class ZstdChunks(ChunkStream):
    """The decompressed bytes of a zstd file, in chunks of about ``chunk_size``."""

    def __init__(self, f: BinaryIO, chunk_size: int, budget: int) -> None:
        super().__init__(f, chunk_size)
        self._budget = budget
        self._decompressor = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
        self._buf = b""  # compressed bytes from offset _buf_at
        self._buf_at = 0
        # Where the file ended when opened: a frame that runs past it is torn (a
        # capture still being written reads as it was).
        self._size = os.fstat(f.fileno()).st_size
        self._read_to = 0  # compressed bytes read so far (for the ratio)
        self.produced = 0
        """Decompressed bytes handed out so far."""
        self._search_from: int | None = None
        self._checked_frames = False  # a frame check came before a frame: all have one
        self._unchecked_frames = False  # a frame came without one
        self._chunks: Iterator[bytes] | None = self._stream(0)

    def __next__(self) -> bytes:
        if self._chunks is None:
            raise StopIteration
        chunk = next(self._chunks, None)
        if chunk is None:
            self._chunks = None
            if self.damage is None or self._search_from is None:
                self._f.close()
            raise StopIteration
        return chunk

    def close(self) -> None:
        self._chunks = None  # the generator refers back to this object: break the cycle
        self._f.close()

    def resume(self) -> bool:
        start, self._search_from = self._search_from, None
        at = None if start is None else self._find_frame(start)
        if at is None:
            self._f.close()
            return False
        self.damage = None
        self._chunks = self._stream(at)
        return True

    # -- chunks out ----------------------------------------------------------------

    def _stream(self, at: int) -> Iterator[bytes]:
        """Chunks of the output from the frame at ``at`` on; sets ``damage`` at a stop."""
        pending: list[bytes] = []
        size = 0
        try:
            for out in self._frames(at):
                pending.append(out)
                size += len(out)
                if size >= self._chunk_size:
                    yield b"".join(pending)
                    pending, size = [], 0
        except _Stop as stop:
            self.damage, self._search_from = stop.damage, stop.search_from
        if pending:
            yield b"".join(pending)

    def _frames(self, at: int) -> Iterator[bytes]:
        check: tuple[int, int] | None = None  # the frame check before this frame
        while True:
            magic = self._bytes(at, at + 4)
            if not magic:
                if check is not None:
                    raise _Stop("the file ends after a zstd frame check", torn=True)
                return
            if magic == ZSTD_MAGIC:
                end = self._checked(at, check)
                check = None
                start, at = at, (yield from self._frame(at))
                if end is not None and at != end:
                    raise _Stop(
                        f"the zstd frame at compressed byte offset {start} ends elsewhere "
                        "than its check says",
                        search_from=end,
                    )
            elif magic == FRAME_CHECK_MAGIC and check is None:
                check = self._frame_check(at)
                at += FRAME_CHECK_SIZE
            elif _SKIPPABLE.fullmatch(magic) and magic != FRAME_CHECK_MAGIC:
                at = self._skippable(at)
            else:
                raise self._not_a_frame(at)

    def _frame_check(self, at: int) -> tuple[int, int]:
        """The (length, digest) the frame check at ``at`` gives the frame after it."""
        data = self._bytes(at, at + FRAME_CHECK_SIZE)
        if len(data) < FRAME_CHECK_SIZE:
            raise _Stop("the file ends inside a zstd frame check", torn=True)
        check = read_frame_check(data)
        if isinstance(check, str):
            raise _Stop(f"{check} at compressed byte offset {at}", search_from=at + 1)
        if self._unchecked_frames:
            self._unchecked_frames = False  # said once; resume reads on from this check
            raise _Stop(
                f"a zstd frame check at compressed byte offset {at} after frames without "
                "one: a damaged check before them",
                search_from=at,
            )
        self._checked_frames = True
        return check

    def _checked(self, at: int, check: tuple[int, int] | None) -> int | None:
        """Hold the compressed frame at ``at`` to its frame check; where it must end."""
        if check is None:
            if self._checked_frames:  # a check's own magic damaged: no frame goes unchecked
                raise _Stop(
                    f"the zstd frame at compressed byte offset {at} has no frame check",
                    search_from=at + 1,
                )
            self._unchecked_frames = True
            return None
        length, digest = check
        end = at + length
        if end > self._size:
            raise _Stop("the file ends inside a zstd frame", torn=True)
        if hash64(self._bytes(at, end)) != digest:
            raise _Stop(
                f"the zstd frame at compressed byte offset {at} does not match its check",
                search_from=end,
            )
        return end

    def _skippable(self, at: int) -> int:
        """Where the skippable frame at ``at`` ends (data a reader passes over)."""
        head = self._bytes(at, at + 8)
        end = at + 8 + int.from_bytes(head[4:], "little")
        if len(head) < 8 or end > self._size:
            raise _Stop("the file ends inside a skippable zstd frame", torn=True)
        self._read_to = max(self._read_to, end)
        return end

    def _not_a_frame(self, at: int) -> _Stop:
        """Bytes at a frame boundary that start no frame: zeros to the end are a torn tail
        (a power loss); anything else is damage, also at the end of the file (plain
        records appended to a compressed archive are refused, not read in part)."""
        follows = self._find_frame(at + 1)
        if follows is None:
            if self._zeros_from(at):
                return _Stop(f"the file ends in zero bytes (from {at})", torn=True)
            return _Stop(
                f"the {self._size - at:,} bytes after the last zstd frame (from compressed "
                f"byte offset {at}) are not compressed: an archive is compressed whole or "
                "not at all"
            )
        return _Stop(
            f"{follows - at} bytes at compressed byte offset {at} are no zstd frame",
            search_from=at + 1,
        )

    def _zeros_from(self, at: int) -> bool:
        """Whether the file holds only zero bytes from ``at`` to its end."""
        while chunk := self._bytes(at, at + _READ):
            if any(chunk):
                return False
            at += len(chunk)
        return True

    def _find_frame(self, start: int) -> int | None:
        """The compressed offset of the next frame's magic from ``start`` on, if any."""
        at = start
        while chunk := self._bytes(at, at + _READ + 3):
            found = _FRAME_START.search(chunk)
            if found is not None:
                return at + found.start()
            if len(chunk) < _READ + 3:
                return None
            at += _READ
        return None

    # -- one frame -----------------------------------------------------------------

    def _frame(self, at: int) -> Generator[bytes, None, int]:
        """Decode the frame at ``at``; return where the next one starts."""
        header_size, checksum = self._frame_header(at)
        decoder = self._decompressor.decompressobj()
        fed = at  # compressed bytes up to here have gone to the decoder
        start_out = self.produced
        pos = at + header_size
        batch_out = 0
        while True:
            try:
                block = self._block(pos)
            except _Stop:  # what the blocks before it hold is good
                yield from self._feed(decoder, fed, pos, at, start_out)
                raise
            if batch_out + block.most_out > _BATCH_OUT or pos - fed > _BATCH_OUT:
                yield from self._feed(decoder, fed, pos, at, start_out)
                fed, batch_out = pos, 0
            batch_out += block.most_out
            pos = block.end
            if block.last:
                break
        yield from self._feed(decoder, fed, pos, at, start_out)
        if checksum:
            if pos + 4 > self._size:
                raise _Stop("the file ends inside a zstd frame's checksum", torn=True)
            yield from self._feed(decoder, pos, pos + 4, at, start_out)
            pos += 4
        return pos

    def _frame_header(self, at: int) -> tuple[int, bool]:
        """(header bytes, whether a checksum ends the frame) of the frame at ``at``."""
        head = self._bytes(at, at + 18)
        if len(head) < 6:
            raise _Stop("the file ends inside a zstd frame header", torn=True)
        descriptor = head[4]
        # Bit 3 is reserved (must be 0); no encoder sets bit 4, which decoders ignore:
        # set, it is a flipped bit in a header no checksum covers.
        if descriptor & 0x18:
            where = f"compressed byte offset {at}"
            raise _Stop(f"damaged zstd frame header at {where}", search_from=at + 1)
        single = descriptor >> 5 & 1
        fcs_size = (single, 2, 4, 8)[descriptor >> 6]
        dict_size = (0, 1, 2, 4)[descriptor & 3]
        size = 5 + (1 - single) + dict_size + fcs_size
        if len(head) < size:
            raise _Stop("the file ends inside a zstd frame header", torn=True)
        if single:
            window = int.from_bytes(head[size - fcs_size : size], "little")
            window += 256 if fcs_size == 2 else 0
        else:
            exponent, mantissa = head[5] >> 3, head[5] & 7
            window = (1 << (10 + exponent)) + ((1 << (10 + exponent)) >> 3) * mantissa
        if window > MAX_WINDOW:
            raise _Stop(
                f"a zstd frame at compressed byte offset {at} needs a {window >> 20:,} MiB "
                f"window, more than the {MAX_WINDOW >> 20} MiB allowed; {_TOOL}",
                search_from=at + 1,
            )
        if dict_size and any(head[5 + 1 - single : 5 + 1 - single + dict_size]):
            raise _Stop(
                f"a zstd frame at compressed byte offset {at} needs a dictionary",
                search_from=at + 1,
            )
        return size, bool(descriptor >> 2 & 1)

    def _block(self, at: int) -> _Block:
        """The block whose 3-byte header is at ``at``."""
        head = self._bytes(at, at + 3)
        if len(head) < 3:
            raise _Stop("the file ends inside a zstd frame", torn=True)
        value = int.from_bytes(head, "little")
        kind, size = value >> 1 & 3, value >> 3
        if kind == 3 or size > _BLOCK_MAX:
            raise _Stop(f"damaged zstd block at compressed byte offset {at}", search_from=at + 1)
        end = at + 3 + (1 if kind == 1 else size)
        if end > self._size:
            raise _Stop("the file ends inside a zstd block", torn=True)
        return _Block(at, end, _BLOCK_MAX if kind == 2 else size, bool(value & 1))

    def _feed(
        self, decoder: zstandard.ZstdDecompressionObj, start: int, end: int, frame: int, out0: int
    ) -> Iterator[bytes]:
        """Decode the compressed bytes ``start:end`` (whole blocks) of the frame at ``frame``."""
        if end <= start:
            return
        try:
            out = decoder.decompress(self._bytes(start, end))
        except zstandard.ZstdError as exc:
            # Find the block that fails; keep what every block before it gives.
            yield from self._salvage(frame, self.produced - out0, end, exc)
            raise AssertionError("unreachable: _salvage raises") from exc
        yield from self._handed(out, end)

    def _salvage(
        self, frame: int, skip: int, end: int, error: zstandard.ZstdError
    ) -> Iterator[bytes]:
        """Decode the frame at ``frame`` again one block at a time, up to ``end``, and
        hand out what follows its first ``skip`` output bytes, up to the failing block."""
        header_size, _ = self._frame_header(frame)
        decoder = self._decompressor.decompressobj()
        pos, fed = frame + header_size, frame
        last = False
        while pos < end:
            # After the last block, only the frame's checksum is left.
            what = "zstd frame checksum" if last else "zstd block"
            block = _Block(pos, pos + 4, 0, True) if last else self._block(pos)
            last = last or block.last
            try:
                out = decoder.decompress(self._bytes(fed, block.end))
            except zstandard.ZstdError as exc:
                where = f"compressed byte offset {pos}"
                raise _Stop(f"damaged {what} at {where} ({exc})", search_from=pos + 1) from exc
            fed = pos = block.end
            if skip >= len(out):
                skip -= len(out)
                continue
            yield from self._handed(out[skip:], block.end)
            skip = 0
        where = f"compressed byte offset {frame}"
        raise _Stop(f"damaged zstd frame at {where} ({error})", search_from=frame + 1)

    def _handed(self, out: bytes, read_to: int) -> Iterator[bytes]:
        """Hand ``out`` on, unless the stream now breaks a bound."""
        self._read_to = max(self._read_to, read_to)
        self.produced += len(out)
        if self.produced > MAX_RATIO * self._read_to + RATIO_SLACK:
            raise _Stop(
                f"decompresses to more than {MAX_RATIO:,}x its compressed size: a "
                f"compression bomb? {_TOOL}"
            )
        if self.produced > self._budget:
            raise _Stop(
                f"decompresses to more than {self._budget:,} bytes, the most a file may "
                f"hold ({BUDGET_ENV}); {_TOOL}"
            )
        if out:
            yield out

    # -- compressed bytes ----------------------------------------------------------

    def _bytes(self, start: int, end: int) -> bytes:
        """The compressed bytes ``start:end`` (fewer at the end of the file)."""
        buf, at = self._buf, self._buf_at
        if start < at or end > at + len(buf):
            self._f.seek(start)
            buf = self._buf = self._f.read(max(end - start, _READ))
            at = self._buf_at = start
        return buf[start - at : end - at]
