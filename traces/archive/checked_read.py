"""An archive's bytes with every version-2 batch checked before any of it is handed on.

``CheckedChunks`` sits between a file's bytes (plain, or decompressed by
``traces/archive/zstd_read.py``) and the scan (``traces/archive/scan.py``). It reads the
header; a version-2 file goes on with the header check and then batches, each behind a
marker (``traces/archive/checksums.py``). It hands on the header and then each batch's
records only once the batch matches its checksum, with the checks left out: the scan
and the column scanner see the stream a version-1 file holds, and a flipped bit is a
batch that fails its check, never a changed record. A file of another version passes
through as it is.

A batch that fails its check, a damaged marker, or bytes where a marker should be stop
the stream with a ``StreamDamage``, as damaged compressed data does; ``resume()`` goes
on at the next batch (the one after a failed batch, whose marker gave its length, or
the next valid marker found). The file ending inside a batch is a torn tail: the
records it holds are handed on unchecked, and ``unchecked_at`` says from where.

Offsets the scan counts are of the stream it is handed; ``file_offset`` turns them back
into offsets in the file (of the decompressed stream for ``.zst``), which every message
names.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator

import msgpack

from tailreplay.traces.archive import format as fmt
from tailreplay.traces.archive.checksums import (
    HEADER_CHECK_SIZE,
    MARKER_HEAD,
    MARKER_SIZE,
    Marker,
    header_check,
    read_marker,
)
from tailreplay.traces.archive.unpack import UNPACK_ERRORS, ObjectCounter, new_unpacker
from tailreplay.traces.archive.zstd_read import Chunk, ChunkStream, StreamDamage

__all__ = ["CheckedChunks"]

_KEEP_OFFSETS = 4 * fmt.MAX_RECORD_BYTES
"""How far behind what was handed on the scan may still name an offset (it holds at
most one unfinished record and a chunk): older entries of the offset table go."""


class _Stop(Exception):
    """The stream stops here. ``search``: on resume, look for the next valid marker;
    ``inner``: the bytes under this stream stopped (damaged compressed data)."""

    def __init__(
        self, reason: str, *, torn: bool = False, search: bool = True, inner: bool = False
    ) -> None:
        super().__init__(reason)
        self.damage = StreamDamage(reason, torn)
        self.search = search
        self.inner = inner


class CheckedChunks(ChunkStream):
    """The checked record stream of the archive whose bytes ``inner`` yields."""

    def __init__(self, inner: ChunkStream, chunk_size: int) -> None:
        self._inner = inner
        self._chunk_size = chunk_size
        self._buf = bytearray()  # inner bytes not handed on yet, from file offset _at
        self._at = 0
        self._inner_ended = False
        self._out = 0  # bytes handed on
        self._out_starts = array("q", [0])
        self._file_starts = array("q", [0])
        self.checked: bool | None = None
        """True for a version-2 file (batches checked), False for any other; None
        until the header is read."""
        self.header_damage: str | None = None
        self.unchecked_at: int | None = None
        """Where the records of a batch cut short by the file's end begin (handed on
        unchecked: a torn tail)."""
        self.lost_records = 0
        """Records in the batches skipped for failing their check (``resume``)."""
        self._failed: Marker | None = None  # the batch that just failed, to skip on resume
        self._search = False
        self._inner_stopped = False  # the damage is the inner stream's
        self._last_read = 0
        self._next: memoryview | None = None  # the part of an inner chunk not looked at yet
        self._chunks: Iterator[Chunk] | None = self._stream()

    # -- the ChunkStream side -----------------------------------------------------------

    def __next__(self) -> Chunk:
        if self._chunks is None:
            raise StopIteration
        chunk = next(self._chunks, None)
        if chunk is None:
            self._chunks = None
            raise StopIteration
        return chunk

    def resume(self) -> bool:
        if self.damage is None:
            return False
        if self._failed is not None:  # its marker was whole: skip exactly that batch
            self.lost_records += self._failed.records
            self._drop(MARKER_SIZE + self._failed.length)
            self._failed = None
        elif self._inner_stopped:
            if not self._inner.resume():  # damaged compressed data: on at the next frame
                return False
            self._inner_ended = self._inner_stopped = False
            self._drop(len(self._buf))  # the start of a batch the damage cut short
            self._search = True
        self.damage = None
        self._chunks = self._stream()
        return True

    def close(self) -> None:
        self._chunks = None
        self._inner.close()

    def file_offset(self, offset: int) -> int:
        """The offset in the file of the byte ``offset`` of the stream handed on."""
        i = bisect.bisect_right(self._out_starts, offset) - 1
        return self._file_starts[i] + offset - self._out_starts[i]

    # -- the stream --------------------------------------------------------------------

    def _stream(self) -> Iterator[Chunk]:
        try:
            if self.checked is None:
                yield from self._header()
            if not self.checked:
                yield from self._passed_through()
                return
            yield from self._batches()
        except _Stop as stop:
            self.damage = stop.damage
            self._search = stop.search
            self._inner_stopped = stop.inner

    def _header(self) -> Iterator[Chunk]:
        """Read the header; hand on a version-2 one, its check left out."""
        end, version = self._header_end()
        v = version if isinstance(version, int) and not isinstance(version, bool) else -1
        self.checked = fmt.CHECKED_SINCE <= v <= fmt.VERSION
        newer = v > fmt.VERSION
        if end is None or not (self.checked or newer):
            return
        self._fill(end + HEADER_CHECK_SIZE)
        check = bytes(self._buf[end : end + HEADER_CHECK_SIZE])
        expected = header_check(bytes(self._buf[:end]))
        if newer:
            # A version-2 header check that fails: a flipped bit in `version` is
            # damage, not a newer format.
            if len(check) == HEADER_CHECK_SIZE and check[:2] == expected[:2] != check:
                self.header_damage = "the header does not match its checksum"
            return
        if len(check) < HEADER_CHECK_SIZE:  # a write cut short right after the header
            if check != expected[: len(check)]:
                self.header_damage = "the header does not match its checksum"
            yield from self._hand_on(end, len(self._buf))
            raise _Stop("the file ends inside the header check", torn=True, search=False)
        if check != expected:
            self.header_damage = "the header does not match its checksum"
        yield from self._hand_on(end, end + HEADER_CHECK_SIZE)

    def _header_end(self) -> tuple[int | None, object]:
        """Where the header ends and its ``version``; (None, None) when the file does not
        start with a header (the scan says what it is)."""
        unpacker = new_unpacker(ObjectCounter())
        while True:
            try:
                header = unpacker.unpack()
            except msgpack.OutOfData:
                if not self._more():
                    return None, None
                try:
                    unpacker.feed(memoryview(self._buf)[len(self._buf) - self._last_read :])
                except msgpack.BufferFull:
                    return None, None
                continue
            except UNPACK_ERRORS:
                return None, None
            if type(header) is not dict:
                return None, None
            return unpacker.tell(), header.get("version")

    def _passed_through(self) -> Iterator[Chunk]:
        """Any other version: the bytes as they are."""
        yield from self._hand_on(len(self._buf), len(self._buf))
        while self._more():
            yield from self._hand_on(len(self._buf), len(self._buf))
        damage = self._inner.damage
        if damage is not None:
            raise _Stop(damage.reason, torn=damage.torn, search=False, inner=True)

    def _batches(self) -> Iterator[Chunk]:
        while True:
            if self._search:
                self._find_marker()
                self._search = False
            out, problem = self._checked_batches()
            if out:
                self._out += len(out)
                yield out
                continue  # the buffer may start with more to check
            if problem is not None:
                if not any(self._buf) and self._rest_is_zeros():
                    # Zeros to the end (a power loss's tail): the scan calls them torn.
                    yield from self._hand_on(len(self._buf), len(self._buf))
                    return
                raise _Stop(f"{problem} at byte offset {self._at}")
            if not self._buf:
                piece = self._take()
                if piece is None:
                    damage = self._inner.damage
                    if damage is not None:
                        raise _Stop(damage.reason, torn=damage.torn, search=False, inner=True)
                    return
                for batch in self._checked_in_place(piece):
                    self._out += len(batch)
                    yield batch
                continue
            if not self._more_of_batch():
                yield from self._at_end()
                return

    def _checked_batches(self) -> tuple[Chunk, str | None]:
        """The records of the whole batches at the buffer's start that match their
        checksums, joined, and what stopped them at the buffer's start: bytes that are
        no valid marker. A batch that fails its check raises once none precedes it."""
        spans: list[tuple[int, int]] = []
        out = self._out
        buf = self._buf
        pos = 0
        problem = None
        while len(buf) - pos >= MARKER_SIZE:
            marker = read_marker(buf[pos : pos + MARKER_SIZE])
            if isinstance(marker, str):
                problem = None if spans else marker
                break
            end = pos + MARKER_SIZE + marker.length
            if end > len(buf):
                break
            with memoryview(buf) as view, view[pos + MARKER_SIZE : end] as batch:
                good = marker.matches(batch)
            if not good:
                if spans:
                    break
                self._failed = marker
                raise _Stop(
                    f"the batch of {marker.records:,} record(s) at byte offset {self._at} "
                    "does not match its checksum",
                    search=False,
                )
            self._map(self._at + pos + MARKER_SIZE, out)
            out += marker.length
            spans.append((pos + MARKER_SIZE, end))
            pos = end
        if len(spans) == 1 and spans[0][0] == MARKER_SIZE:
            return self._handed_whole(pos), problem
        records = b"".join(buf[start:end] for start, end in spans)
        self._drop(pos)
        return records, problem

    def _checked_in_place(self, piece: memoryview) -> list[memoryview]:
        """The records of the whole batches at the start of ``piece`` (part of an inner
        chunk, which nothing changes) that match their checksums, as views of it: no
        copy. What follows them goes to the buffer, where the rest of the checks are."""
        views = []
        out = self._out
        pos = 0
        while len(piece) - pos >= MARKER_SIZE:
            marker = read_marker(piece[pos : pos + MARKER_SIZE])
            end = pos + MARKER_SIZE + marker.length if isinstance(marker, Marker) else -1
            if not isinstance(marker, Marker) or end > len(piece):
                break
            batch = piece[pos + MARKER_SIZE : end]
            if not marker.matches(batch):
                break  # the buffer's path says so
            self._map(self._at + pos + MARKER_SIZE, out)
            out += marker.length
            views.append(batch)
            pos = end
        self._at += pos
        self._buf += piece[pos:]
        self._last_read = len(piece) - pos
        return views

    def _handed_whole(self, end: int) -> bytearray:
        """The one batch at the buffer's start (ending at ``end``) handed on as the
        buffer itself, its marker cut off, the rest moved to a new buffer: a big batch
        is copied once on its way through, not three times."""
        batch, self._buf = self._buf, self._buf[end:]
        del batch[end:]
        del batch[:MARKER_SIZE]  # O(1): a bytearray drops its front by moving its start
        self._at += end
        return batch  # a bytearray nothing here touches again

    def _at_end(self) -> Iterator[Chunk]:
        """The stream ends with fewer bytes than the batch (or marker) that starts them:
        a torn tail, or damaged compressed data that cut it short."""
        damage = self._inner.damage
        buf = self._buf
        if damage is not None:
            # Compressed: the records of a frame cut short passed through no checksum,
            # only through the decoder (which a flipped bit can make write other bytes).
            # They are the batch being written when the writer stopped, and left out.
            raise _Stop(damage.reason, torn=damage.torn, search=False, inner=True)
        if not buf:
            return
        if not any(buf):
            yield from self._hand_on(len(buf), len(buf))  # zeros: the scan calls them torn
            return
        if len(buf) < MARKER_SIZE:
            if bytes(buf[:3]) != MARKER_HEAD[: len(buf)]:
                raise _Stop(f"{len(buf)} bytes at byte offset {self._at} are no batch marker")
            raise _Stop("the file ends inside a batch marker", torn=True, search=False)
        # A plain file cut short: the bytes of its last batch are the file's own (its
        # marker, checked, gave a length past the end), so its whole records are kept.
        self.unchecked_at = self._at + MARKER_SIZE
        self._drop(MARKER_SIZE)
        yield from self._hand_on(len(self._buf), len(self._buf))
        raise _Stop("the file ends inside a batch", torn=True, search=False)

    def _find_marker(self) -> None:
        """Drop bytes up to the next valid batch marker (or all of them)."""
        start = 1
        while True:
            i = self._buf.find(MARKER_HEAD, start)
            while i >= 0 and i + MARKER_SIZE <= len(self._buf):
                if isinstance(read_marker(self._buf[i : i + MARKER_SIZE]), Marker):
                    self._drop(i)
                    return
                i = self._buf.find(MARKER_HEAD, i + 1)
            keep = len(self._buf) - i if i >= 0 else min(len(self._buf), len(MARKER_HEAD) - 1)
            self._drop(len(self._buf) - keep)
            start = 0
            if not self._more():
                self._drop(len(self._buf))
                return

    # -- bytes in and out ----------------------------------------------------------------

    def _take(self) -> memoryview | None:
        """The next bytes from the inner stream (what is left of the last chunk first);
        None at its end."""
        if self._next is not None:
            piece, self._next = self._next, None
            return piece
        if self._inner_ended:
            return None
        chunk = next(self._inner, None)
        if chunk is None:
            self._inner_ended = True
            return None
        return memoryview(chunk)

    def _more(self) -> bool:
        """Read the next inner bytes into the buffer; False at the end of the inner stream."""
        piece = self._take()
        if piece is None:
            return False
        self._buf += piece
        self._last_read = len(piece)
        return True

    def _more_of_batch(self) -> bool:
        """Like ``_more``, but only as far as the batch the buffer starts is long: what
        follows it is checked in place (``_checked_in_place``)."""
        piece = self._take()
        if piece is None:
            return False
        need = MARKER_SIZE - len(self._buf)
        if need <= 0:
            marker = read_marker(self._buf[:MARKER_SIZE])
            need = MARKER_SIZE + marker.length - len(self._buf) if isinstance(marker, Marker) else 0
        need = max(need, 1)
        if need < len(piece):
            piece, self._next = piece[:need], piece[need:]
        self._buf += piece
        self._last_read = len(piece)
        return True

    def _fill(self, size: int) -> None:
        while len(self._buf) < size and self._more():
            pass

    def _rest_is_zeros(self) -> bool:
        """Whether the buffer and the rest of the inner stream are zero bytes; reads
        ahead while it sees zeros, keeping one chunk of them."""
        while self._more():
            if any(memoryview(self._buf)[-self._last_read :]):
                return False
            if len(self._buf) > 2 * self._chunk_size:
                self._drop(len(self._buf) - self._chunk_size)
        return True

    def _hand_on(self, size: int, consumed: int) -> Iterator[Chunk]:
        """Hand on the buffer's first ``size`` bytes and drop its first ``consumed``."""
        self._map(self._at)
        data = bytes(self._buf[:size])
        self._drop(consumed)
        if data:
            self._out += len(data)
            yield data

    def _drop(self, n: int) -> None:
        del self._buf[:n]
        self._at += n

    def _map(self, file_at: int, out_at: int | None = None) -> None:
        """Note that the byte handed on at ``out_at`` (default: the next) is the file's
        byte ``file_at``."""
        out_at = self._out if out_at is None else out_at
        if self._out_starts[-1] == out_at:
            self._file_starts[-1] = file_at
        else:
            self._out_starts.append(out_at)
            self._file_starts.append(file_at)
        if len(self._out_starts) > 1 << 16 and self._out_starts[1 << 15] < out_at - _KEEP_OFFSETS:
            keep = bisect.bisect_right(self._out_starts, out_at - _KEEP_OFFSETS) - 1
            del self._out_starts[:keep]
            del self._file_starts[:keep]
