"""ArchiveWriter: append records from any thread; a background thread packs and writes.

The request path never waits on disk: ``append()`` is a length check and a deque
append. A daemon thread drains the deque, packs records, writes them in batches,
flushes every ``flush_interval`` (so a ``kill -9`` loses at most that much), rotates
files by size and age, and survives a failing disk by dropping and counting. Every
flush writes checked batches (``traces/archive/checksums.py``): each behind a marker
holding its checksum, and in a compressed file each its own zstd frame with zstd's
content checksum.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
import zstandard

from tailreplay.errors import InputError
from tailreplay.private import open_private
from tailreplay.traces.archive.checksums import (
    MARKER_SIZE,
    checked_batch,
    frame_check,
    header_check,
    split_batches,
)
from tailreplay.traces.archive.format import MAX_RECORD_BYTES, MAX_STR_LEN, VERSION, rotated_name
from tailreplay.traces.archive.reader import count_readable
from tailreplay.traces.archive.record import UNPACKABLE, Record, pack_record, record_to_map
from tailreplay.traces.archive.validate import record_problem, without_invalid, without_oversized

__all__ = ["ArchiveWriter", "FrameWriter", "WholeWrites", "WriterStats"]

log = logging.getLogger("tailreplay.archive")

_BATCH_BYTES = 4 << 20  # write early when this much is pending, whatever the interval
_IDLE_WAIT_S = 0.05  # how long the writer thread sleeps when it has nothing to do


class WriterStats:
    """Counters a caller can read at any time (plain ints; read without locking)."""

    __slots__ = ("dropped", "files", "written")

    def __init__(self) -> None:
        self.written = 0
        self.dropped = 0
        self.files: list[Path] = []


class ArchiveWriter:
    """Write records to one archive file or to a rotating series of files.

    Exactly one of ``path`` (one file, no rotation) or ``directory`` (files named
    ``<prefix>-<UTC start>-<host>-<pid>-<seq>.msgpack``) is given. ``compress``
    defaults to the path's suffix (``.zst``) for one file and to False for a series.
    ``on_written`` is called on the writer thread after every write to the file, with
    the number of records now in files (the recorder publishes its counts from there);
    ``on_dropped`` with the new total after every drop, from whichever thread dropped.

    ``check`` holds each record to the table every reader holds it to
    (``traces/archive/validate.py``): a field a reader would call damage (a client's
    ``max_tokens: -1``) is left out, with one warning a field, and a record without
    a valid ``start_ns`` dropped, so an archive written is always read whole. It costs
    ~2 µs a record: False for records read from an archive or checked already. Values
    longer than a reader unpacks (``traces/archive/format.py``) are left out whatever
    ``check`` says: only a record packed to 1 MiB or more can hold one, so the test
    costs nothing below that.

    ``pack_on_append`` packs each record in ``append``, in the caller's thread, for a
    caller whose pauses cost more than its CPU (the replayer's event loop): the thread
    packing a batch holds the GIL throughout (~2.6 µs a record, 0.65 ms for the 250
    records of 50 ms at 5,000/s) and sends due meanwhile wait; packed one at a time,
    the same work never delays a send by more than one record's. It also suits a
    caller that builds records on a thread of its own (the proxy's recorder): the
    writer thread then only writes bytes, and the two threads do not trade the GIL
    for every batch. ``pack`` is one C call that holds the GIL, so appends from
    several threads cannot interleave in it.

    >>> with ArchiveWriter("out.msgpack", header=make_header("merge")) as w:
    ...     w.append(record)
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        header: dict[str, Any],
        directory: str | os.PathLike[str] | None = None,
        prefix: str = "capture",
        rotate_bytes: int | None = None,
        rotate_interval_s: float | None = None,
        flush_interval: float = 1.0,
        compress: bool | None = None,
        queue_size: int = 100_000,
        block_when_full: bool = False,
        on_written: Callable[[int], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
        pack_on_append: bool = False,
        check: bool = True,
        shown_as: str | os.PathLike[str] | None = None,
    ) -> None:
        if (path is None) == (directory is None):
            raise ValueError("give exactly one of path or directory")
        self._path = Path(path) if path is not None else None
        self._shown = Path(shown_as) if shown_as is not None else self._path
        """The name a failed first open gives (the final name of a file written beside it)."""
        self._directory = Path(directory) if directory is not None else None
        if compress is None:
            compress = self._path is not None and self._path.suffix == ".zst"
        self._compress = compress
        self._prefix = prefix
        self._header = header
        self._rotate_bytes = rotate_bytes
        self._rotate_interval_s = rotate_interval_s
        self._flush_interval = flush_interval
        self._maxsize = queue_size
        # Capture drops rather than wait (the request path must not block); batch
        # tools (merge, slice, import) wait instead, since a dropped record is lost data.
        self._block = block_when_full
        self._space = threading.Event()
        self.stats = WriterStats()
        self._on_written = on_written
        self._on_dropped = on_dropped
        self.error: OSError | None = None
        """The last write error; the single-file form stops writing after one."""
        self._check = check
        self._warned: set[str] = set()  # the fields warned about (``_warn_invalid``)
        self._pack = msgpack.Packer().pack if pack_on_append else None
        """Set: ``append`` packs each record in the caller's thread (class docstring)."""

        self._queue: deque[Record | dict[str, Any] | bytes] = deque()
        self._drop_lock = threading.Lock()
        self._closing = False
        self._wake = threading.Event()
        self._start()

    def _start(self) -> None:
        """The file state, the first file and the thread."""
        self._seq = 0
        self._file: BinaryIO | None = None
        self._zstd: FrameWriter | None = None  # a compressed file's
        self._file_bytes = 0
        self._file_opened = 0.0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._failed_at: float | None = None
        self._file_has_records = False
        # Open the first file here, so a bad --out fails at start-up, not in the thread.
        self._open_next()
        self._thread = threading.Thread(target=self._run, name="archive-writer", daemon=True)
        self._thread.start()

    # -- the caller's side ---------------------------------------------------------

    def append(self, record: Record | dict[str, Any]) -> bool:
        """Queue one record (or an archive map) for writing; False if it was dropped.

        Safe from the event loop and from any thread; never blocks. The writer owns
        the record from here on: do not change it afterwards.
        """
        while self._block and len(self._queue) >= self._maxsize and self._thread.is_alive():
            self._space.clear()
            self._space.wait(_IDLE_WAIT_S)
        if self._closing or len(self._queue) >= self._maxsize:
            self._count_dropped(1)
            return False
        item = record if self._pack is None else self._pack_or_drop(self._pack, record)
        if item is None:
            return False
        self._queue.append(item)
        return True

    @property
    def paths(self) -> list[Path]:
        """Every file this writer has created so far."""
        return list(self.stats.files)

    def close(self) -> None:
        """Write everything queued, flush, fsync and close. Idempotent."""
        if self._closing and not self._thread.is_alive():
            return
        self._closing = True
        self._wake.set()
        self._thread.join()

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the writer thread ---------------------------------------------------------

    def _run(self) -> None:
        packb = msgpack.Packer().pack
        queue = self._queue
        next_flush = time.monotonic() + self._flush_interval
        while True:
            closing = self._closing  # read before draining, so nothing queued after is missed
            while queue:
                self._emit_many(self._packed(packb, _take(queue, 4096)))
                if self._pending_bytes >= _BATCH_BYTES:  # a burst: write as it comes
                    self._flush()
            self._space.set()
            now = time.monotonic()
            if now >= next_flush or self._pending_bytes >= _BATCH_BYTES:
                self._flush()
                next_flush = now + self._flush_interval
            if (
                self._rotate_interval_s is not None
                and self._file is not None
                and now - self._file_opened >= self._rotate_interval_s
            ):
                self._flush()
                self._rotate()
            if closing:
                self._flush()
                self._close_file(fsync=True)
                return
            if not queue:
                self._wake.wait(_IDLE_WAIT_S)

    def _packed(
        self, packb: Callable[[Any], bytes], batch: list[Record | dict[str, Any] | bytes]
    ) -> list[bytes]:
        packed = []
        for m in batch:  # a map packed by append is bytes
            data = m if isinstance(m, bytes) else self._pack_or_drop(packb, m)
            if data is not None:
                packed.append(data)
        return packed

    def _pack_or_drop(
        self, pack: Callable[[Any], bytes], record: Record | dict[str, Any]
    ) -> bytes | None:
        """``pack_record`` of the record as every reader will accept it (a field
        outside the archive's table left out: a client's ``max_tokens: -1``), or None
        (dropped and counted) for one without a valid ``start_ns`` or with a value of
        no record field's type, so one bad record never stops the writer, nor makes
        the archive unreadable."""
        mapping = record if isinstance(record, dict) else record_to_map(record)
        if self._check and record_problem(mapping) is not None:
            kept, problems = without_invalid(mapping)
            self._warn_invalid(problems, dropped=kept is None)
            if kept is None:
                self._count_dropped(1)
                return None
            mapping = kept
        try:
            packed = pack_record(pack, mapping)
            if len(packed) >= MAX_STR_LEN:  # only then can a value be too long (any source)
                mapping, problems = without_oversized(mapping)
                self._warn_invalid(problems, dropped=False)
                packed = pack_record(pack, mapping) if problems else packed
        except UNPACKABLE:
            log.error("a record with a value of no record field's type was dropped")
            self._count_dropped(1)
            return None
        if len(packed) > MAX_RECORD_BYTES:
            log.error(
                "a record of %d bytes was dropped (an archive holds %d)",
                len(packed),
                MAX_RECORD_BYTES,
            )
            self._count_dropped(1)
            return None
        return packed

    def _warn_invalid(self, problems: list[str], *, dropped: bool) -> None:
        """One warning a kind of problem (its field), however many records have it."""
        for problem in problems:
            kind = problem.split(" ", 1)[0]
            if kind in self._warned:
                continue
            self._warned.add(kind)
            what = "a record was dropped" if dropped else "a value was left out of a record"
            log.warning("%s (the archive could not hold it): %s", what, problem)

    def _emit_many(self, packed: list[bytes]) -> None:
        if self._rotate_bytes is None and self._file is not None:
            # The common case, kept free of per-record Python calls.
            nbytes = sum(map(len, packed))
            self._pending.extend(packed)
            self._pending_bytes += nbytes
            self._file_bytes += nbytes
            self._file_has_records = self._file_has_records or bool(packed)
            return
        for data in packed:
            self._emit(data)

    def _emit(self, data: bytes) -> None:
        if self._file is None and not self._reopen():
            self._count_dropped(1)
            return
        if (
            self._rotate_bytes is not None
            and self._file_bytes + len(data) > self._rotate_bytes
            and self._file_has_records
        ):
            self._flush()
            self._rotate()
            if self._file is None:
                self._count_dropped(1)
                return
        self._pending.append(data)
        self._pending_bytes += len(data)
        self._file_bytes += len(data)
        self._file_has_records = True

    def _flush(self) -> None:
        if self._file is None or not self._pending:
            return
        pending = self._pending
        self._pending = []
        size, self._pending_bytes = self._pending_bytes, 0
        batches = split_batches(pending, size)
        self._file_bytes += MARKER_SIZE * len(batches)
        done = 0
        try:
            for batch in batches:
                data = checked_batch(batch)
                if self._zstd is not None:
                    self._zstd.write(data)
                    continue
                # Unbuffered: a short write tells us exactly how much reached the file.
                view = memoryview(data)
                end = done + len(data)
                while done < end:
                    done += self._file.write(view[len(data) - (end - done) :]) or 0
        except OSError as exc:
            if self._zstd is None:
                complete = _records_within(batches, done)
            else:  # compressed: only the file itself tells which blocks reached it
                complete = self._readable_in_file(len(pending))
            self.stats.written += complete
            self._count_dropped(len(pending) - complete)
            self._published()
            self._fail(exc)
            return
        self.stats.written += len(pending)
        self._published()

    def _readable_in_file(self, most: int) -> int:
        """How many of the last ``most`` records written to the current file a reader
        gets from it as it now is on disk (whole blocks of a failed compressed write)."""
        assert self._file is not None
        with contextlib.suppress(OSError):
            self._file.flush()
        readable = count_readable(self.stats.files[-1])
        return min(max(readable - (self.stats.written - self._written_at_open), 0), most)

    def _published(self) -> None:
        if self._on_written is not None:
            self._on_written(self.stats.written)

    def _fail(self, exc: OSError) -> None:
        if self._failed_at is None:
            # One line per incident, not one per record.
            log.warning("archive write failed (%s); dropping records until the disk recovers", exc)
        self.error = exc
        self._failed_at = time.monotonic()
        self._close_file(fsync=False, broken=True)

    def _reopen(self) -> bool:
        """After a failure, try a fresh file (never append after a torn record)."""
        if self._directory is None:
            return False  # one named file: a second open would truncate what it holds
        if (
            self._failed_at is not None
            and time.monotonic() - self._failed_at < self._flush_interval
        ):
            return False
        self._open_next()
        return self._file is not None

    def _rotate(self) -> None:
        self._close_file(fsync=True)
        self._open_next()

    def _open_next(self) -> None:
        if self._path is not None:
            path = self._path
        else:
            assert self._directory is not None
            name = rotated_name(self._prefix, time.time_ns(), self._seq, compress=self._compress)
            path = self._directory / name
            self._seq += 1
        created = False
        try:
            # Unbuffered: a short write tells _flush exactly what reached the file.
            f: BinaryIO = open_private(path, "wb", buffering=0)  # type: ignore[assignment]
            created = True
            self._file = f
            # Whatever version a header copied from an input says, this file is written
            # in the current one.
            header = dict(self._header, version=VERSION, created_ns=time.time_ns())
            # A file name that is not UTF-8 (an input's, in "inputs") is written with "?".
            head = msgpack.packb(header, unicode_errors="replace")
            head += header_check(head)
            if self._compress:
                # One frame a batch, each with zstd's content checksum and its content
                # size, behind a check of its compressed bytes: damage costs at most its
                # batch, and --skip-corrupt reads on at the next frame.
                self._zstd = FrameWriter(f)
                self._zstd.write(head)
            else:
                f.write(head)
            f.flush()
        except OSError as exc:
            if created:  # no whole header (a full disk): never leave an unreadable file
                self._close_file(fsync=False, broken=True)
                with contextlib.suppress(OSError):
                    path.unlink()
            if self._failed_at is None and not self.stats.files:
                # The very first open: a bad --out, one line for the caller to print.
                shown = self._shown if self._path is not None else path
                raise InputError(f"{shown}: cannot write ({exc.strerror or exc})") from exc
            self._fail(exc)
            return
        if self._failed_at is not None:
            log.warning("archive writing resumed in %s", path)
            self._failed_at = None
        self.stats.files.append(path)
        self._file_bytes = len(head)
        self._written_at_open = self.stats.written
        self._file_has_records = False
        self._file_opened = time.monotonic()

    def _close_file(self, *, fsync: bool, broken: bool = False) -> None:
        """Close the current file; ``broken``: a write to it just failed, so nothing more
        is written (a flush after a torn write would only fail again)."""
        f, self._file = self._file, None
        self._zstd = None
        if f is None:
            return
        try:
            if broken:
                return
            f.flush()  # every flush ended its frame: nothing is held in the compressor
            if fsync:
                os.fsync(f.fileno())
        except OSError as exc:
            self.error = exc
            log.warning("archive close failed: %s", exc)
        finally:
            with contextlib.suppress(OSError):
                f.close()

    def _count_dropped(self, n: int) -> None:
        with self._drop_lock:
            self.stats.dropped += n
            if self._on_dropped is not None:
                self._on_dropped(self.stats.dropped)


def _take(
    queue: deque[Record | dict[str, Any] | bytes], limit: int
) -> list[Record | dict[str, Any] | bytes]:
    batch = []
    popleft = queue.popleft
    try:
        for _ in range(limit):
            batch.append(popleft())
    except IndexError:
        pass
    return batch


def _records_within(batches: list[list[bytes]], nbytes: int) -> int:
    """How many records of ``batches`` (each written behind its marker) lie wholly within
    their first ``nbytes`` bytes: a reader gets them, the last batch's unchecked."""
    count = 0
    for batch in batches:
        nbytes -= MARKER_SIZE
        for data in batch:
            nbytes -= len(data)
            if nbytes < 0:
                return count
            count += 1
    return count


# How a compressed file's batches go on disk: one zstd frame a batch, behind its frame
# check (docs/archive-format.md, "Checksums"), each written whole.


class FrameWriter:
    """Writes each piece of data it is given as one zstd frame (with its content size
    and zstd's content checksum) after that frame's check, whole or not at all.

    Frames are made by a compression object told the size ahead, not by
    ``compress()``: the one-shot call cuts incompressible data (request bodies) into
    ~7 KiB blocks, and a reader walks every block (docs/benchmarks.md).
    """

    __slots__ = ("_compressor", "_file")

    def __init__(self, file: BinaryIO) -> None:
        self._file = WholeWrites(file)
        self._compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)

    def write(self, data: bytes) -> None:
        obj = self._compressor.compressobj(size=len(data))
        frame = obj.compress(data) + obj.flush()
        self._file.write(frame_check(frame) + frame)


class WholeWrites:
    """A file whose ``write`` writes all it is given or raises. A compressed frame written
    in part (a disk filling up) and then followed by the next would lose bytes from the
    middle of the stream, and records after them would be counted written but unreadable
    once space came back; here the rest is tried again, and a disk still full raises."""

    __slots__ = ("_file",)

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        done = 0
        while done < len(view):
            n = self._file.write(view[done:])
            if not n:
                raise OSError(errno.ENOSPC, "no space left: a write made no progress")
            done += n
        return done

    def flush(self) -> None:
        self._file.flush()
