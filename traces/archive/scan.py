"""One archive file, scanned: chunks in, checked record maps out, damage found and got past.

Reading is defensive: the header is checked, unpacking is limited in bytes and in
objects (``traces/archive/unpack.py``), every record is checked (``traces/archive/validate.py``), a
torn final record (a crash, ``kill -9``) is tolerated with a warning, damage in the
middle raises ``ArchiveCorrupt`` naming the byte offset — or, with
``skip_corrupt``, is skipped: a damaged record that decodes is skipped whole, bytes
that do not decode are skipped up to the next valid record (``traces/archive/resync.py``).
An empty or zero-filled file is no damage: it holds no records. Offsets in ``.zst``
files count decompressed bytes. A version-2 file's batches are checked before the scan
sees them (``traces/archive/checked_read.py``): the scan reads the records they hold,
its offsets turned back into the file's for every message.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import msgpack

from tailreplay.errors import (
    ArchiveCorrupt,
    ArchiveError,
    ArchiveVersionError,
    NotAnArchive,
)
from tailreplay.traces.archive import format as fmt
from tailreplay.traces.archive.file_bytes import (
    CHUNK,
    check_readable,
    compressed,
    grew_past,
    open_chunks,
)
from tailreplay.traces.archive.file_report import Damage, FileReport
from tailreplay.traces.archive.resync import RECORD_START, probe, record_follows
from tailreplay.traces.archive.unpack import (
    UNPACK_ERRORS,
    ObjectCounter,
    declared_keys,
    new_unpacker,
)
from tailreplay.traces.archive.validate import clean_header, header_problems, record_problem
from tailreplay.traces.archive.zstd_read import Chunk

__all__ = ["FileReport", "FileScan", "check_readable", "open_chunks"]

_BIG = 4 << 20
_TOO_LONG = f"an object longer than the {fmt.MAX_RECORD_BYTES >> 20} MiB record limit"

_Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def changed_while_read(path: Path, counted: int, now: int) -> ArchiveError:
    """A file that holds fewer records than an earlier read of it counted: truncated,
    rotated or replaced meanwhile, so the reads no longer describe one set."""
    return ArchiveError(
        f"{path}: changed while being read ({counted:,} records at the first read, "
        f"{now:,} now); replay a copy that nothing rewrites"
    )


def _upgrades(header: dict[str, Any], path: Path) -> list[_Upgrade]:
    version = header.get("version")
    if type(version) is not int:
        raise NotAnArchive(f"{path}: header has no integer version")
    if version > fmt.VERSION:
        raise ArchiveVersionError(
            f"{path}: archive format version {version} is newer than this tailreplay reads "
            f"(version {fmt.VERSION}); upgrade tailreplay"
        )
    steps = []
    for v in range(version, fmt.VERSION):
        if v not in fmt.UPGRADES:
            raise ArchiveVersionError(f"{path}: no upgrade from archive format version {v}")
        step = fmt.UPGRADES[v]
        if step is not None:
            steps.append(step)
    return steps


class FileScan:
    """The scan of one archive file, one step at a time.

    ``records()`` drives it: read the next chunk, unpack the whole objects it
    completes (the header first), check each, and on damage or at the end of the
    file decide what the bytes that did not unpack are. Offsets are absolute:
    decompressed bytes from the start of the file. After each record it yields,
    ``cost`` is an upper bound of the bytes that record holds in memory. With
    ``limit``, it stops after that many records (a file still being written is read
    as it was when first counted).
    """

    def __init__(
        self, path: Path, report: FileReport, skip_corrupt: bool, limit: int | None = None
    ) -> None:
        self.path = path
        self.limit = limit
        self.report = report
        self.skip_corrupt = skip_corrupt
        self.header_only = False
        self.chunks = open_chunks(path)
        self.eof = False
        self.counter = ObjectCounter()
        self.unpacker = new_unpacker(self.counter)
        # ``buf`` mirrors the bytes the unpacker has not consumed yet: on damage we
        # need them to look for the next record. Between steps it starts at ``base``.
        self.buf = bytearray()
        self.base = 0  # absolute offset where the next object starts
        self.ubase = 0  # absolute offset where the current unpacker started
        self.upgrades: list[_Upgrade] | None = None  # None until the header is read
        self.cost = 0
        self.zeros_dropped = 0  # zero bytes read ahead and let go (see _rest_is_zeros)

    def records(self) -> Iterator[dict[str, Any]]:
        """The valid record maps in file order (at most ``limit``), filling ``report``."""
        if self.limit is None:
            return self._records()
        return self._first(self.limit)

    def _first(self, limit: int) -> Iterator[dict[str, Any]]:
        n = 0
        for m in itertools.islice(self._records(), limit):
            n += 1
            yield m
        if n < limit:
            raise changed_while_read(self.path, limit, n)

    def _records(self) -> Generator[dict[str, Any], None, None]:
        try:
            yield from self._scan()
        finally:  # done, or the consumer stopped: let go of the file now
            self.chunks.close()

    def _scan(self) -> Generator[dict[str, Any], None, None]:
        while not self.report.empty and not (self.header_only and self.upgrades is not None):
            damage = None
            if not self.eof and (chunk := self._read_chunk()) is not None:
                try:
                    self.unpacker.feed(chunk)
                except msgpack.BufferFull:
                    damage = self.base, _TOO_LONG
            if damage is None:
                damage = yield from self._unpack_whole_objects()
                if self.report.empty or (self.header_only and self.upgrades is not None):
                    return
            if damage is None and len(self.buf) > fmt.MAX_RECORD_BYTES:
                damage = self.base, _TOO_LONG  # it cannot end as a valid record
            if damage is None and self.eof:
                damage = self._leftover_damage()
            if damage is not None:
                if not self._get_past(*damage):
                    return
            elif self.eof and not self._past_end():
                return

    def _read_chunk(self) -> Chunk | None:
        """Append the file's next chunk to ``buf`` and return it; None (``eof`` set) at the end."""
        chunk = next(self.chunks, None)
        if chunk is None:
            self.eof = True
        else:
            self.buf += chunk
        return chunk

    def _unpack_whole_objects(self) -> Generator[dict[str, Any], None, Damage | None]:
        """Yield the valid records the unpacker holds whole; return the damage that
        stopped it, if any. The header is checked when it comes by. ``buf`` is trimmed
        to what is left."""
        # The hot loop of every read: its state lives in locals while it runs.
        unpacker, counter, report = self.unpacker, self.counter, self.report
        ubase = self.ubase
        upgrades = self.upgrades
        start = base = self.base
        damage: Damage | None = None
        while True:
            # ``base`` is where the next object starts: tell() cannot be trusted for
            # that after an OutOfData, since it then already counts the partial object.
            pos = base
            try:
                obj = unpacker.unpack()
            except msgpack.OutOfData:
                break
            except UNPACK_ERRORS as exc:
                damage = pos, f"undecodable: {str(exc) or type(exc).__name__}"
                break
            base = ubase + unpacker.tell()
            size, objects, counter.n = base - pos, counter.n, 0
            if size > fmt.MAX_RECORD_BYTES:
                damage = pos, _TOO_LONG
                break
            if upgrades is None:
                upgrades = self.upgrades = self._check_header(obj)
                if report.empty or self.header_only:
                    return None
                continue
            if type(obj) is not dict:
                damage = pos, "not a record map"
                break
            if len(obj) != declared_keys(self.buf, pos - start):
                # msgpack keeps the last of a key given twice: the map was damaged.
                self._damaged_record(pos, "a key appears twice")
                continue
            if size > _BIG:  # let go of the bytes and buffers it took before handing it out
                del self.buf[: base - start]
                self.base = start = base
                self._restart_unpacker()
                unpacker, ubase = self.unpacker, self.ubase
            for step in upgrades:
                obj = step(obj)
            problem = record_problem(obj)
            if problem is not None:
                self._damaged_record(pos, problem)
                continue
            report.records += 1
            # Each map or array entry takes at most 64 bytes beyond its encoded bytes
            # (a pointer, and an int, str or empty-container object).
            self.cost = size + 64 * objects
            yield obj
        # Damaged or partial, the object at ``pos`` is not consumed: trim ``buf`` to start
        # there, where the other steps expect it.
        self.base = pos
        del self.buf[: pos - start]
        return damage

    def _damaged_record(self, at: int, problem: str) -> None:
        """A record that decoded but is not valid: an error, or skipped whole."""
        report = self.report
        number = report.records + report.skipped_records + 1
        at = self.chunks.file_offset(at)
        if not self.skip_corrupt:
            raise ArchiveCorrupt(str(self.path), at, f"record {number}: {problem}")
        report.skipped_records += 1
        if report.first_skip is None:
            report.first_skip = (at, f"record {number}: {problem}")

    def _check_header(self, obj: object) -> list[_Upgrade]:
        """Check the file's first object is a header; return the upgrades its version needs."""
        if (
            obj == 0
            and type(obj) is int
            and not any(self.buf)
            and self._rest_is_zeros()
            and not self._broken()
        ):
            self.report.empty = True  # zero-filled: allocated, never written
            return []
        damage = self.chunks.header_damage
        if type(obj) is dict and len(obj) != declared_keys(self.buf, 0):
            damage = "a key appears twice"
        if damage is not None and not self.skip_corrupt:
            raise ArchiveError(
                f"{self.path}: damaged header ({damage}); use --skip-corrupt to read its "
                "records as far as they are whole"
            )
        if type(obj) is not dict or obj.get("format") != fmt.FORMAT:
            raise NotAnArchive(f"{self.path}: not a tailreplay archive (no header)")
        upgrades = _upgrades(obj, self.path)
        problems = header_problems(obj)
        self.report.checked = bool(self.chunks.checked)
        self.report.compressed = compressed(self.path)
        if problems and not self.skip_corrupt:
            raise ArchiveError(
                f"{self.path}: damaged header ({problems[0]}); use --skip-corrupt to read "
                "its records without the damaged header fields"
            )
        self.report.header = clean_header(obj) if problems else obj
        self.report.header_problems = problems
        self.report.header_damage = damage
        return upgrades

    def _leftover_damage(self) -> Damage | None:
        """At the end of the file: are the bytes that form no whole object damage?"""
        # Bytes left at the end that do not form a whole object: a torn final record,
        # unless a valid record follows them — then a damaged length prefix is
        # swallowing the rest of the file, and that is corruption.
        if self.buf and self.upgrades is not None and record_follows(self.buf):
            return self.base, "an object's length runs past the records after it"
        return None

    def _get_past(self, bad_at: int, reason: str) -> bool:
        """Deal with damage at ``bad_at``: raise, end as a torn tail, or resync.

        True when a record was found after the damage and the scan goes on.
        """
        if self.upgrades is None:
            raise NotAnArchive(f"{self.path}: not a tailreplay archive ({reason})")
        if self._rest_is_zeros():
            if self._broken():  # zeros up to damaged compressed data: a bomb's zero tail
                return self._past_broken_stream(bad_at)
            # Zero-filled blocks after a power loss: a torn tail, not damage.
            self.report.torn_at = self.chunks.file_offset(bad_at)
            return False
        if not self.skip_corrupt:
            raise ArchiveCorrupt(str(self.path), self.chunks.file_offset(bad_at), reason)
        skipped, _ = self._resync()
        skipped += self.zeros_dropped
        self.zeros_dropped = 0
        self.report.skipped_bytes += skipped
        self.report.skipped_regions += 1
        # Found or not, the scan goes on: at the end of the stream (``eof``), the next
        # step sees whether damaged compressed data stopped it.
        self.base = bad_at + skipped
        self._restart_unpacker()
        return True

    def _past_end(self) -> bool:
        """At the end of the stream: note how it ended. True when the scan goes on (past
        damaged compressed data, at the next frame)."""
        if self._broken():
            return self._past_broken_stream(self.base)
        self._check_end()
        return False

    def _broken(self) -> bool:
        """Whether damaged compressed data (not a torn tail) stopped the stream."""
        damage = self.chunks.damage
        return damage is not None and not damage.torn

    def _past_broken_stream(self, at: int) -> bool:
        """Damaged compressed data stopped the stream; ``at`` starts the first record it
        cost. Raise, or skip to the next zstd frame: True when there is one."""
        damage = self.chunks.damage
        assert damage is not None
        if self.upgrades is None:
            raise NotAnArchive(f"{self.path}: not a tailreplay archive ({damage.reason})")
        at = self.chunks.file_offset(at)
        if not self.skip_corrupt:
            raise ArchiveCorrupt(str(self.path), at, damage.reason)
        report = self.report
        report.skipped_compressed += 1
        if report.first_compressed_skip is None:
            report.first_compressed_skip = (at, damage.reason)
        # What ``buf`` holds is the start of a record the damage cut short.
        self.base += self.zeros_dropped + len(self.buf)
        self.zeros_dropped = 0
        self.buf.clear()
        self._restart_unpacker()
        resumed = self.chunks.resume()
        report.lost_records = self.chunks.lost_records
        if not resumed:
            return False
        self.eof = False
        return True

    def _restart_unpacker(self) -> None:
        """A new unpacker (and mirror) holding only the bytes from ``base`` on."""
        self.buf = bytearray(self.buf)
        self.ubase = self.base
        self.counter.n = 0
        self.unpacker = new_unpacker(self.counter)
        self.unpacker.feed(bytes(self.buf))

    def _rest_is_zeros(self) -> bool:
        """True if ``buf`` and the rest of the file hold only zero bytes.

        Reads ahead only while it sees zeros. What it reads stays in ``buf``, but for
        zeros past one chunk, which it counts in ``zeros_dropped`` instead (a file of
        zeros is read in bounded memory).
        """
        if any(self.buf):
            return False
        while (chunk := self._read_chunk()) is not None:
            if any(chunk):
                return False
            if len(self.buf) > 2 * CHUNK:
                extra = len(self.buf) - CHUNK
                del self.buf[:extra]
                self.zeros_dropped += extra
        return True

    def _resync(self) -> tuple[int, bool]:
        """Drop bytes from the front of ``buf`` up to the next decodable record.

        Returns (bytes dropped, whether a record was found). Only bytes that can start
        a map are probed (found by a regex, at C speed); scanned bytes are dropped as
        the scan goes, so memory stays bounded by one record however long the damage.
        """
        buf = self.buf
        dropped = 0
        i = 1  # the damaged byte itself starts no record
        while True:
            found = RECORD_START.search(buf, i)
            if found is None:
                # No record starts in buf[i:], unless in its last bytes (a map header the
                # next chunk completes): let the rest go, read on.
                cut = len(buf) - min(len(buf) - i, 5)
                del buf[:cut]
                dropped += cut
                i = 0
                if self._read_chunk() is None:
                    dropped += len(buf)
                    buf.clear()
                    return dropped, False
                continue
            i = found.start()
            verdict = probe(buf, i, self.eof)
            if verdict is None:  # needs more bytes than we hold yet
                self._read_chunk()
                continue
            if verdict:
                del buf[:i]
                return dropped + i, True
            i += 1
            if i > fmt.MAX_RECORD_BYTES:
                del buf[:i]
                dropped += i
                i = 0

    def _check_end(self) -> None:
        """The file ended cleanly or torn: a header must have been read; note a torn tail."""
        if self.upgrades is None:
            if self.base == 0 and not self.buf and self.chunks.damage is None:
                self.report.empty = True
                return
            raise NotAnArchive(f"{self.path}: not a tailreplay archive (truncated header)")
        # A compressed stream that ended torn ends a record, or a frame the records of
        # whose last blocks are lost: torn either way.
        if self.buf or self.chunks.damage is not None:
            self.report.torn_at = self.chunks.file_offset(self.base)
            read = self.chunks.file_offset(self.base + len(self.buf))
            self.report.growing = grew_past(self.path, read)
            self.report.unchecked_at = self.chunks.unchecked_at

    def read_header(self) -> None:
        """Read as far as the header (filling ``report``), and no further."""
        self.header_only = True
        for _ in self.records():
            pass
