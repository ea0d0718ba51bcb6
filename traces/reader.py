"""ArchiveReader: stream records from one or many archive files.

Reading is defensive: the header is checked, unpacking is size-limited, a torn
final record (a crash, ``kill -9``) is tolerated with a warning, damage in the
middle raises ``ArchiveCorrupt`` naming the byte offset — or, with
``skip_corrupt``, is skipped by resynchronising on the next valid record.
Offsets in ``.zst`` files count decompressed bytes.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
import zstandard

from tailreplay.errors import ArchiveCorrupt, ArchiveVersionError, InputError, NotAnArchive
from tailreplay.traces import format as fmt
from tailreplay.traces.record import Record

__all__ = ["ArchiveReader", "FileReport", "check_readable", "open_chunks", "read_header"]

log = logging.getLogger("tailreplay.archive")

_CHUNK = 1 << 20
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_MAP_STARTS = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])  # fixmap, map16, map32
_UNPACK_ERRORS = (
    ValueError,  # includes msgpack.FormatError, StackError, ExtraData, size limits
    UnicodeDecodeError,
    TypeError,  # an unhashable map key
)
# Without a promise of order, records arrive in completion order: a record can come
# up to its duration after a later-starting one. Writers that know their timeout say
# so in the header (capture.timeout_s); otherwise assume this much.
DEFAULT_REORDER_WINDOW_NS = 15 * 60 * 10**9

_Upgrade = Callable[[dict[str, Any]], dict[str, Any]]
_Records = Generator[dict[str, Any], None, None]
_Damage = tuple[int, str]  # (absolute byte offset, what is wrong there)


def _new_unpacker() -> msgpack.Unpacker:
    return msgpack.Unpacker(
        raw=False,
        strict_map_key=True,
        max_buffer_size=fmt.MAX_RECORD_BYTES,
        max_str_len=fmt.MAX_STR_LEN,
        max_bin_len=fmt.MAX_BIN_LEN,
        max_array_len=fmt.MAX_ARRAY_LEN,
        max_map_len=fmt.MAX_MAP_LEN,
        max_ext_len=0,
    )


def _valid_record(obj: object) -> bool:
    # Cheap enough for every record; strict enough that random bytes almost never
    # pass, which is what resynchronisation relies on.
    if type(obj) is not dict:
        return False
    start = obj.get("start_ns")
    return type(start) is int


class FileReport:
    """What reading one file found: its header and any damage."""

    __slots__ = ("header", "path", "records", "skipped_bytes", "skipped_regions", "torn_at")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: dict[str, Any] = {}
        self.records = 0
        self.torn_at: int | None = None
        self.skipped_bytes = 0
        self.skipped_regions = 0


def check_readable(path: Path) -> None:
    """One clear error for a path that cannot be read as a file."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")


def open_chunks(path: Path, chunk_size: int = _CHUNK) -> Iterator[bytes]:
    """The file's bytes in chunks, decompressed when it is a zstd stream."""
    try:
        f: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed in finally below
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc
    try:
        magic = f.read(4)
        f.seek(0)
        if magic == _ZSTD_MAGIC:
            reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
            while True:
                try:
                    chunk = reader.read(chunk_size)
                except zstandard.ZstdError as exc:
                    log.warning("%s: compressed stream damaged (%s); reading stops here", path, exc)
                    return
                if not chunk:
                    return
                yield chunk
        else:
            while chunk := f.read(chunk_size):
                yield chunk
    finally:
        f.close()


def _upgrade(header: dict[str, Any], path: Path) -> list[_Upgrade]:
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
        steps.append(fmt.UPGRADES[v])
    return steps


class _FileScan:
    """The scan of one archive file, one step at a time.

    ``records()`` drives it: read the next chunk, unpack the whole objects it
    completes (the header first), and on damage or at the end of the file decide
    what the bytes that did not unpack are. Offsets are absolute: decompressed bytes
    from the start of the file.
    """

    def __init__(self, path: Path, report: FileReport, skip_corrupt: bool) -> None:
        self.path = path
        self.report = report
        self.skip_corrupt = skip_corrupt
        self.chunks = open_chunks(path)
        self.eof = False
        self.unpacker = _new_unpacker()
        # ``buf`` mirrors the bytes the unpacker has not consumed yet: on damage we
        # need them to look for the next record. Between steps it starts at ``base``.
        self.buf = bytearray()
        self.base = 0  # absolute offset where the next object starts
        self.ubase = 0  # absolute offset where the current unpacker started
        self.upgrades: list[_Upgrade] | None = None  # None until the header is read

    def records(self) -> _Records:
        """Yield the record maps in file order, filling ``report`` as it goes."""
        while True:
            if not self.eof and (chunk := self._read_chunk()) is not None:
                self.unpacker.feed(chunk)
            damage = yield from self._unpack_whole_objects()
            if damage is None and self.eof:
                damage = self._leftover_damage()
            if damage is not None:
                if not self._get_past(*damage):
                    return
            elif self.eof:
                self._check_end()
                return

    def _read_chunk(self) -> bytes | None:
        """Append the file's next chunk to ``buf`` and return it; None (``eof`` set) at the end."""
        chunk = next(self.chunks, None)
        if chunk is None:
            self.eof = True
        else:
            self.buf += chunk
        return chunk

    def _unpack_whole_objects(self) -> Generator[dict[str, Any], None, _Damage | None]:
        """Yield the records the unpacker holds whole; return the damage that stopped it, if any.

        The header is checked when it comes by. ``buf`` is trimmed to what is left.
        """
        # The hot loop of every read: its state lives in locals while it runs.
        unpacker = self.unpacker
        ubase = self.ubase
        upgrades = self.upgrades
        report = self.report
        start = base = self.base
        damage: _Damage | None = None
        while True:
            # ``base`` is where the next object starts: tell() cannot be trusted for
            # that after an OutOfData, since it then already counts the partial object.
            pos = base
            try:
                obj = unpacker.unpack()
            except msgpack.OutOfData:
                break
            except _UNPACK_ERRORS as exc:
                damage = pos, f"undecodable: {str(exc) or type(exc).__name__}"
                break
            base = ubase + unpacker.tell()
            if upgrades is None:
                upgrades = self.upgrades = self._check_header(obj)
                continue
            if not _valid_record(obj):
                damage = pos, "not a record map"
                break
            for step in upgrades:
                obj = step(obj)
            report.records += 1
            yield obj
        # Damaged or partial, the object at ``pos`` is not consumed: trim ``buf`` to start
        # there, where the other steps expect it.
        self.base = pos
        del self.buf[: pos - start]
        return damage

    def _check_header(self, obj: object) -> list[_Upgrade]:
        """Check the file's first object is a header; return the upgrades its version needs."""
        if type(obj) is not dict or obj.get("format") != fmt.FORMAT:
            raise NotAnArchive(f"{self.path}: not a tailreplay archive (no header)")
        self.report.header = obj
        return _upgrade(obj, self.path)

    def _leftover_damage(self) -> _Damage | None:
        """At the end of the file: are the bytes that form no whole object damage?"""
        # Bytes left at the end that do not form a whole object: a torn final record,
        # unless a valid record follows them — then a damaged length prefix is
        # swallowing the rest of the file, and that is corruption.
        if self.buf and self.upgrades is not None and _record_follows(self.buf):
            return self.base, "an object's length runs past the records after it"
        return None

    def _get_past(self, bad_at: int, reason: str) -> bool:
        """Deal with damage at ``bad_at``: raise, end as a torn tail, or resync.

        True when a record was found after the damage and the scan goes on.
        """
        if self.upgrades is None:
            raise NotAnArchive(f"{self.path}: not a tailreplay archive ({reason})")
        if self._rest_is_zeros():
            # Zero-filled blocks after a power loss: a torn tail, not damage.
            self.report.torn_at = bad_at
            return False
        if not self.skip_corrupt:
            raise ArchiveCorrupt(str(self.path), bad_at, reason)
        skipped, found = self._resync()
        self.report.skipped_bytes += skipped
        self.report.skipped_regions += 1
        if not found:
            return False
        self.base = self.ubase = bad_at + skipped
        self.unpacker = _new_unpacker()
        self.unpacker.feed(bytes(self.buf))
        return True

    def _rest_is_zeros(self) -> bool:
        """True if ``buf`` and the rest of the file hold only zero bytes.

        Reads ahead only while it sees zeros; what it reads stays in ``buf``.
        """
        if any(self.buf):
            return False
        while (chunk := self._read_chunk()) is not None:
            if any(chunk):
                return False
        return True

    def _resync(self) -> tuple[int, bool]:
        """Drop bytes from the front of ``buf`` up to the next decodable record.

        Returns (bytes dropped, whether a record was found). Scanned bytes are dropped
        as the scan goes, so memory stays bounded by one record however long the damage.
        """
        buf = self.buf
        dropped = 0
        i = 1
        while True:
            if i >= len(buf) - 1 and not self.eof:
                self._read_chunk()
                continue
            if i >= len(buf):
                dropped += len(buf)
                buf.clear()
                return dropped, False
            if buf[i] in _MAP_STARTS:
                verdict = _probe(buf, i, self.eof)
                if verdict is None:  # needs more bytes than we hold yet
                    self._read_chunk()
                    continue
                if verdict:
                    del buf[:i]
                    return dropped + i, True
            i += 1
            if i > fmt.MAX_RECORD_BYTES:
                del buf[: i - 1]
                dropped += i - 1
                i = 1

    def _check_end(self) -> None:
        """The file ended cleanly or torn: a header must have been read; note a torn tail."""
        if self.upgrades is None:
            what = "empty file" if self.base == 0 and not self.buf else "truncated header"
            raise NotAnArchive(f"{self.path}: not a tailreplay archive ({what})")
        if self.buf:
            self.report.torn_at = self.base


def _iter_file(path: Path, report: FileReport, skip_corrupt: bool) -> _Records:
    """Yield the record maps of one file in file order, filling ``report`` as it goes."""
    return _FileScan(path, report, skip_corrupt).records()


def _record_follows(buf: bytearray) -> bool:
    """Does a valid record start in ``buf`` after its first byte? (No more bytes will come.)"""
    return any(buf[i] in _MAP_STARTS and _probe(buf, i, True) for i in range(1, len(buf)))


def _probe(buf: bytearray, i: int, eof: bool) -> bool | None:
    """Does a valid record start at ``buf[i]``? None when more bytes are needed to tell."""
    window = 1 << 16
    while True:
        probe = _new_unpacker()
        probe.feed(bytes(buf[i : i + window]))
        try:
            return _valid_record(probe.unpack())
        except msgpack.OutOfData:
            if i + window < len(buf) and window < fmt.MAX_RECORD_BYTES:
                window *= 16
                continue
            if eof or window >= fmt.MAX_RECORD_BYTES:
                return False
            return None
        except _UNPACK_ERRORS:
            return False


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The header of one archive (raises the same errors as reading it)."""
    p = Path(path)
    check_readable(p)
    report = FileReport(p)
    it = _iter_file(p, report, skip_corrupt=False)
    try:
        next(it, None)
    except ArchiveCorrupt:
        pass  # the header itself was fine
    finally:
        it.close()
    return report.header


class ArchiveReader:
    """Records from one or many archive files.

    Iterating yields ``Record`` objects in ``start_ns`` order across all files (a
    streaming k-way merge; each file is re-ordered within a bounded window, since
    capture files hold records in completion order). ``order="file"`` yields them as
    stored, file by file. ``iter_maps()`` yields the raw maps (faster; keeps unknown
    keys, which ``merge`` and ``slice`` pass through unchanged).

    >>> reader = ArchiveReader(["a.msgpack", "b.msgpack"])
    >>> for record in reader: ...
    >>> reader.warnings()  # torn tails, skipped bytes
    """

    def __init__(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        skip_corrupt: bool = False,
        order: str = "time",
    ) -> None:
        self.paths = [Path(p) for p in paths]
        if not self.paths:
            raise InputError("no archive files given")
        if order not in ("time", "file"):
            raise ValueError(f"order must be 'time' or 'file', not {order!r}")
        self.order = order
        self.skip_corrupt = skip_corrupt
        self.reports = [FileReport(p) for p in self.paths]
        self.late = 0
        """Records that arrived later than the re-ordering window allowed (yielded anyway)."""
        for path, report in zip(self.paths, self.reports, strict=True):
            check_readable(path)
            report.header = read_header(path)

    @property
    def headers(self) -> list[dict[str, Any]]:
        return [r.header for r in self.reports]

    def __iter__(self) -> Iterator[Record]:
        from_map = Record.from_map
        for m in self.iter_maps():
            yield from_map(m)

    def iter_maps(self) -> Iterator[dict[str, Any]]:
        streams = [
            _iter_file(p, r, self.skip_corrupt)
            for p, r in zip(self.paths, self.reports, strict=True)
        ]
        if self.order == "file":
            for s in streams:
                yield from s
            return
        ordered = [self._in_time_order(s, r) for s, r in zip(streams, self.reports, strict=True)]
        if len(ordered) == 1:
            yield from ordered[0]
        else:
            yield from heapq.merge(*ordered, key=_start)

    def _in_time_order(
        self, maps: Iterator[dict[str, Any]], report: FileReport
    ) -> Iterator[dict[str, Any]]:
        """Re-order one file's completion-ordered records into start order.

        A record is written when its exchange completes, so every later record in the
        file started no earlier than (latest completion seen) - (longest possible
        duration). Records older than that watermark can safely go out.
        """
        header = report.header
        if header.get("ordered") is True:
            window = 0
        else:
            timeout_s = (header.get("capture") or {}).get("timeout_s")
            window = (
                int(timeout_s * 1e9) + 60 * 10**9
                if isinstance(timeout_s, int | float)
                else DEFAULT_REORDER_WINDOW_NS
            )
        if window == 0:
            yield from self._check_order(maps)
            return
        heap: list[tuple[int, int, dict[str, Any]]] = []
        seq = 0
        watermark = -(1 << 63)
        last_out = -(1 << 63)
        for m in maps:
            start = m["start_ns"]
            done = start + (m.get("duration_ns") or 0)
            if done > watermark:
                watermark = done
            if start < last_out:
                self.late += 1
                yield m
                continue
            heapq.heappush(heap, (start, seq, m))
            seq += 1
            limit = watermark - window
            while heap and heap[0][0] <= limit:
                last_out, _, out = heapq.heappop(heap)
                yield out
        while heap:
            yield heapq.heappop(heap)[2]

    def _check_order(self, maps: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """A file that promises order: pass records through, counting any that break it."""
        last = -(1 << 63)
        for m in maps:
            start = m["start_ns"]
            if start < last:
                self.late += 1
            else:
                last = start
            yield m

    def warnings(self) -> list[str]:
        """One human line per problem met so far (after iterating)."""
        lines = []
        for r in self.reports:
            if r.torn_at is not None:
                lines.append(
                    f"{r.path}: torn final record at byte offset {r.torn_at} ignored "
                    f"(the writer was interrupted); {r.records} complete records read"
                )
            if r.skipped_bytes:
                lines.append(
                    f"{r.path}: skipped {r.skipped_bytes} corrupt bytes in "
                    f"{r.skipped_regions} region(s)"
                )
        if self.late:
            lines.append(f"{self.late} records were out of time order beyond the reorder window")
        return lines

    @property
    def skipped_bytes(self) -> int:
        return sum(r.skipped_bytes for r in self.reports)


def _start(m: dict[str, Any]) -> int:
    start: int = m["start_ns"]
    return start
