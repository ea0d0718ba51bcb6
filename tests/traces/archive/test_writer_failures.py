"""The writer under pressure: kill -9, a full queue, a disk that refuses writes."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.writer import ArchiveWriter
from tests.helpers import REPO

FLUSH_S = 0.5
# Besides the flush interval itself: the writer's idle wake-up (50 ms) and a busy CI
# machine descheduling the child. Generous, so the test never flakes; the bound it
# checks is still far below "everything since the start".
SLACK_S = 1.0

_CHILD = textwrap.dedent(
    """
    import sys, time
    from tailreplay.traces.archive.format import make_header
    from tailreplay.traces.archive.record import Record
    from tailreplay.traces.archive.writer import ArchiveWriter
    w = ArchiveWriter(
        directory=sys.argv[1], header=make_header("test"), flush_interval=float(sys.argv[2])
    )
    print("ready", flush=True)
    i = 0
    while True:  # bounded by the parent's kill; a hard cap below in case it never comes
        w.append(Record(start_ns=time.time_ns(), input_tokens=i))
        i += 1
        if i > 5_000_000:
            break
        time.sleep(0.0005)
    """
)


def test_kill_9_loses_at_most_the_last_flush_interval(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path), str(FLUSH_S)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(2.2)
        killed_ns = time.time_ns()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    files = list(tmp_path.iterdir())
    assert len(files) == 1
    reader = ArchiveReader(files, order="file")
    got = list(reader)
    assert got, "nothing reached the disk"
    # No gaps: what is there is a prefix of what was appended.
    assert [r.input_tokens for r in got] == list(range(len(got)))
    lost_s = (killed_ns - got[-1].start_ns) / 1e9
    assert lost_s <= FLUSH_S + SLACK_S, f"lost the last {lost_s:.2f} s of records"


def test_a_full_queue_drops_and_counts_never_blocks(tmp_path: Path) -> None:
    writer = ArchiveWriter(tmp_path / "a.msgpack", header=make_header("t"), queue_size=10)
    t0 = time.perf_counter()
    accepted = sum(writer.append(Record(start_ns=i)) for i in range(50_000))
    elapsed = time.perf_counter() - t0
    writer.close()
    assert writer.stats.dropped == 50_000 - accepted
    assert writer.stats.dropped > 0
    assert writer.stats.written == accepted
    assert len(list(ArchiveReader([tmp_path / "a.msgpack"]))) == accepted
    assert elapsed < 5  # 50k appends; it would take minutes if append waited on disk


_DISK_CHILD = textwrap.dedent(
    """
    import resource, signal, sys, json
    from tests.traces.archive.test_writer_failures import _session
    from tailreplay.traces.archive.format import make_header
    from tailreplay.traces.archive.record import Record
    from tailreplay.traces.archive.writer import ArchiveWriter
    # A file-size limit makes write() fail with EFBIG, as a full disk fails with ENOSPC.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
    w = ArchiveWriter(sys.argv[1], header=make_header("t"), flush_interval=0.01)
    for i in range(3000):
        w.append(Record(start_ns=i, path="/v1/chat/completions", session=_session(i)))
    w.close()
    print(json.dumps({"written": w.stats.written, "dropped": w.stats.dropped,
                      "error": str(w.error)}))
    """
)


def _session(i: int) -> str:
    """48 hex digits that do not compress: a compressed file fills its limit too."""
    return hashlib.sha256(str(i).encode()).hexdigest()[:48]


@pytest.mark.parametrize("name", ["a.msgpack", "a.msgpack.zst"])
def test_a_failing_disk_drops_and_counts_and_keeps_what_was_written(
    tmp_path: Path, name: str
) -> None:
    """What is counted written is what a reader gets, compressed too: there a write cut
    short by the limit must raise, not lose bytes (zstandard ignores a short count)."""
    path = tmp_path / name
    out = subprocess.run(
        [sys.executable, "-c", _DISK_CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    import json

    stats = json.loads(out.stdout)
    assert stats["dropped"] > 0
    assert stats["written"] + stats["dropped"] == 3000
    assert "File too large" in stats["error"]
    assert out.stderr.count("archive write failed") == 1  # one line per incident
    reader = ArchiveReader([path])
    got = list(reader)
    assert len(got) == stats["written"] and got == [
        Record(start_ns=i, path="/v1/chat/completions", session=_session(i))
        for i in range(len(got))
    ]
    assert os.path.getsize(path) <= 20_000


def test_values_an_archive_cannot_hold_are_replaced_and_later_records_still_written(
    tmp_path: Path,
) -> None:
    """A server's hostile values (an integer past 64 bits, a JSON "\\ud800" decoded to a
    lone surrogate) reach a record; packed in either thread, the record is kept with
    them replaced, and the writer goes on with the records after it."""
    hostile = Record(start_ns=1, status=429, retry_after_ms=10**20, input_tokens=7,
                     error_message="slow down \ud800", req_headers=[("x", "\udcff")])  # fmt: skip
    after = Record(start_ns=2, status=200, output_tokens=3)
    for packed in (False, True):
        path = tmp_path / f"out-{packed}.msgpack"
        with ArchiveWriter(path, header=make_header("test"), pack_on_append=packed) as w:
            assert w.append(hostile) and w.append(after)
        assert w.stats.written == 2 and w.stats.dropped == 0
        first, second = ArchiveReader([path], order="file")
        assert (first.retry_after_ms, first.input_tokens) == (None, 7)
        assert first.error_message == "slow down ?" and first.req_headers == [("x", "?")]
        assert second == after


def test_values_outside_the_archive_table_are_left_out_so_every_reader_reads_it_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A record made from what a client or server sent can hold a value every reader
    would call damage (a client's max_tokens -1): the writer leaves that field out
    (one warning a field), drops a record without a valid start_ns (counted), and the
    archive reads whole in strict mode, in either packing mode."""
    bad = Record(start_ns=1, max_tokens=-1, input_tokens=2**40, status=1000,
                 prefix_hashes=[1, 2**64], model="m")  # fmt: skip
    no_start = Record(start_ns=-5, max_tokens=3)
    fine = Record(start_ns=2, max_tokens=-1, output_tokens=3)
    for packed in (False, True):
        caplog.clear()
        path = tmp_path / f"out-{packed}.msgpack"
        with ArchiveWriter(path, header=make_header("test"), pack_on_append=packed) as w:
            w.append(bad)
            w.append(no_start)
            w.append(fine)
        assert (w.stats.written, w.stats.dropped) == (2, 1)
        first, second = ArchiveReader([path], order="file")  # strict: damage raises
        assert first == Record(start_ns=1, model="m")
        assert second == Record(start_ns=2, output_tokens=3)
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert sum("'max_tokens' must be an int in 0..2^32-1 (got -1)" in m for m in warned) == 1
        assert any("'prefix_hashes'" in m for m in warned)
        assert any("a record was dropped" in m and "'start_ns'" in m for m in warned)


def test_write_archive_counts_only_what_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "out.msgpack"
    records = [Record(start_ns=1), Record(start_ns=-1), Record(start_ns=3)]
    assert write_archive(path, make_header("test"), records) == 2
    assert [r.start_ns for r in ArchiveReader([path], order="file")] == [1, 3]


def test_values_longer_than_a_reader_unpacks_are_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 1 MiB model name (a hostile client), 2^20 + 1 inter-token gaps (a hostile
    stream), a 2 MiB finish reason: each is left out, in either packing mode and for
    records the caller calls checked, and the archive reads whole."""
    long = Record(start_ns=1, model="A" * ((1 << 20) + 4096), finish_reason="x" * (2 << 20),
                  chunk_gaps_us=[1] * ((1 << 20) + 1), output_tokens=3)  # fmt: skip
    for packed, check in ((False, True), (True, True), (False, False)):
        path = tmp_path / f"out-{packed}-{check}.msgpack"
        with ArchiveWriter(path, header=make_header("test"), pack_on_append=packed,
                           check=check) as w:  # fmt: skip
            w.append(long)
            w.append(Record(start_ns=2, model="m"))
        got = list(ArchiveReader([path], order="file"))  # strict: damage raises
        assert got == [Record(start_ns=1, output_tokens=3), Record(start_ns=2, model="m")]
    assert "'chunk_gaps_us' is longer than an archive holds" in caplog.text


class _ShortThenFull:
    """A file the kernel fills: the first write takes half, the next takes all again
    (space freed meanwhile), then every write fails as a full disk does."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.calls = 0

    def write(self, data: memoryview) -> int:
        self.calls += 1
        if self.calls == 1:
            half = len(data) // 2
            self.data += data[:half]
            return half
        if self.calls == 2:
            self.data += data
            return len(data)
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        pass


def test_a_short_write_is_finished_or_raises_never_lost() -> None:
    from tailreplay.traces.archive.writer import WholeWrites

    sink = _ShortThenFull()
    assert WholeWrites(sink).write(b"0123456789") == 10  # type: ignore[arg-type]
    assert bytes(sink.data) == b"0123456789"  # the rest was written, not dropped
    with pytest.raises(OSError):
        WholeWrites(sink).write(b"more")
