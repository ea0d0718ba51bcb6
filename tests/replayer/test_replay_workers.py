"""``replay --workers N``: N processes, one shard each, one merged result."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tailreplay.cli import cli
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader, read_header
from tests.helpers import UNBOUND, assert_client_verdict_consistent, write_plain

T0 = 1_700_000_000 * 10**9


def _archive(path: Path, n: int) -> list[dict]:
    rng = random.Random(12)
    maps = [
        {
            "start_ns": T0 + i * 10**7, "trace_id": rng.randbytes(16),
            "span_id": rng.randbytes(8), "method": "POST", "path": "/v1/chat/completions",
            "model": "m", "stream": True, "input_tokens": rng.randint(20, 200),
            "output_tokens": rng.randint(2, 6), "duration_ns": rng.randint(10**8, 10**9),
        }
        for i in range(n)
    ]  # fmt: skip
    write_plain(path, maps)
    return maps


def _two_workers(tmp_path: Path, *extra: str) -> tuple[list[dict], Result, Path, dict]:
    """400 requests at 100/s replayed by two workers against the simulator: (the
    recorded maps, the command's result, the result archive, the JSON summary)."""
    maps = _archive(tmp_path / "a.msgpack", 400)
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    with sim_process(["--profile", "fast", "--max-num-seqs", "512"]) as sim:
        result = CliRunner().invoke(
            cli,
            [
                "replay", str(tmp_path / "a.msgpack"), "--target", sim, "--workers", "2",
                "--out", str(out), "--json", str(summary), *extra,
            ],
        )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return maps, result, out, json.loads(summary.read_text())


def test_two_workers_send_every_request_once_on_one_schedule(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    maps, result, out, s = _two_workers(tmp_path, *UNBOUND)
    assert "2 workers, one shard each" in result.stderr
    # The workers' own lines reach the terminal directly, each tagged.
    assert "[worker 1/2] replaying shard 1/2 of 400 requests" in capfd.readouterr().err
    results = list(ArchiveReader([out]))
    assert len(results) == 400
    assert Counter(r.orig_trace_id for r in results) == Counter(m["trace_id"] for m in maps)
    shards = Counter(r.shard for r in results)
    assert set(shards) == {0, 1} and min(shards.values()) > 100
    # One schedule: every request due at the common start plus its recorded offset.
    starts = {m["trace_id"]: m["start_ns"] for m in maps}
    offsets = {r.intended_ns - starts[r.orig_trace_id] for r in results if r.intended_ns}
    assert len(offsets) == 1
    assert s["completed"] == s["sent"] == 400 and s["workers"] == 2
    # When they left is the perf test below; the summary's verdict agrees with its lag.
    assert_client_verdict_consistent(s, result.stdout)
    header = read_header(out)
    assert header["source"] == "replay" and header["workers"] == 2
    assert header["archives"] == [str((tmp_path / "a.msgpack").resolve())]
    assert not list(tmp_path.glob(".r.msgpack.parts"))  # the parts are gone


@pytest.mark.perf
def test_two_workers_send_on_time(tmp_path: Path) -> None:
    _, result, _, s = _two_workers(tmp_path)
    # Lag P99 ~1 ms here, within the default limit (5 ms) over both workers' sends.
    assert s["lag_ms"]["p99"] <= s["client"]["lag_limit_ms"] == 5.0, s["lag_ms"]
    assert not s["client"]["client_bound"], result.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--shard", "0/2"], "run --shard i/N without it"),
        (["--metrics-listen", "127.0.0.1:9"], "not with --workers"),
        (["--dry-run"], "it sends nothing"),
        (["--workers", "0"], "Invalid value for '--workers'"),
    ],
)
def test_workers_refuse_what_they_cannot_do(tmp_path: Path, extra: list[str], message: str) -> None:
    _archive(tmp_path / "a.msgpack", 10)
    result = CliRunner().invoke(
        cli,
        ["replay", str(tmp_path / "a.msgpack"), "--target", "http://127.0.0.1:9", "--workers",
         "2", "--out", str(tmp_path / "r.msgpack"), *extra],
    )  # fmt: skip
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_a_workers_refusal_keeps_its_exit_code(tmp_path: Path) -> None:
    header = {"format": "tailreplay", "version": 1, "source": "proxy",
              "upstream": "http://127.0.0.1:9"}  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", [{"start_ns": T0}], header)
    result = CliRunner().invoke(
        cli,
        ["replay", str(archive), "--target", "http://127.0.0.1:9", "--workers", "2",
         "--out", str(tmp_path / "r.msgpack")],
    )  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert "Error: worker 0/2: --target http://127.0.0.1:9 is the upstream" in result.stderr


def test_a_failed_merge_keeps_every_workers_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tailreplay.replayer.local_shards as workers
    from tailreplay.errors import InputError

    def full_disk(*args: object, **kwargs: object) -> None:  # ENOSPC cannot be made here
        raise InputError("r.msgpack: write failed: [Errno 28] No space left on device")

    monkeypatch.setattr(workers, "copy_records", full_disk)
    _archive(tmp_path / "a.msgpack", 60)
    with sim_process(["--profile", "fast"]) as sim:
        result = CliRunner().invoke(
            cli,
            ["replay", str(tmp_path / "a.msgpack"), "--target", sim, "--workers", "2",
             "--out", str(tmp_path / "r.msgpack")],
        )  # fmt: skip
    assert result.exit_code == 3, result.stderr
    parts = tmp_path / ".r.msgpack.parts"
    assert f"each worker's results are kept in {parts}/" in result.stderr
    kept = list(ArchiveReader(sorted(parts.glob("part-*.msgpack"))))
    assert len(kept) == 60
    # A second run does not mix its results into those, nor delete them.
    again = CliRunner().invoke(
        cli,
        ["replay", str(tmp_path / "a.msgpack"), "--target", "http://127.0.0.1:9",
         "--workers", "2", "--out", str(tmp_path / "r.msgpack")],
    )  # fmt: skip
    assert again.exit_code == 2 and "holds the results of an earlier run" in again.stderr
    assert len(list(parts.glob("part-*.msgpack"))) == 2


def test_a_shard_that_starts_late_keeps_the_common_schedule(tmp_path: Path) -> None:
    """Two machines' shards with one --start-at; the second starts about a second late."""
    maps = _archive(tmp_path / "a.msgpack", 200)
    starts = {m["trace_id"]: m["start_ns"] for m in maps}
    replay = [sys.executable, "-m", "tailreplay", "replay", str(tmp_path / "a.msgpack")]
    with sim_process(["--profile", "fast", "--max-num-seqs", "512"]) as sim:
        start_at = time.time_ns() + 3 * 10**9
        common = ["--target", sim, "--start-at", str(start_at / 1e9)]
        first = subprocess.Popen(
            [*replay, *common, "--shard", "0/2", "--out", str(tmp_path / "0.msgpack")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(4.0)  # past --start-at, by a second and the second one's start-up
        late = subprocess.run(
            [*replay, *common, "--shard", "1/2", "--out", str(tmp_path / "1.msgpack")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert first.wait(timeout=120) == 0, first.stderr.read() if first.stderr else ""
    assert late.returncode == 0, late.stderr
    assert "warning: shard 1/2 started" in late.stderr and "after --start-at" in late.stderr
    shard0 = list(ArchiveReader([tmp_path / "0.msgpack"]))
    shard1 = list(ArchiveReader([tmp_path / "1.msgpack"]))
    assert len(shard0) + len(shard1) == 200
    # One schedule, to the nanosecond: due at --start-at plus the recorded offset.
    first_start = min(starts.values())
    for r in (*shard0, *shard1):
        assert r.intended_ns == round(start_at / 1e9 * 1e9) + starts[r.orig_trace_id] - first_start
    # The late shard's first requests carry the delay as lag (a second and its start-up);
    # the punctual one's do not (started 3 s ahead: late, if ever, by far less).
    late, punctual = max(r.lag_ns for r in shard1), max(r.lag_ns for r in shard0)
    assert min(r.lag_ns for r in shard1) >= 0 and late >= 10**9
    assert punctual < late - 5 * 10**8, (punctual, late)


def test_a_damaged_archive_under_workers_is_one_line_and_exit_3(tmp_path: Path) -> None:
    path = tmp_path / "a.msgpack"
    _archive(path, 400)
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 40] = b"\xc1" * 40  # 0xc1: never valid msgpack
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(
        cli, ["replay", str(path), "--target", "http://127.0.0.1:9", "--workers", "2",
              "--out", str(tmp_path / "r.msgpack")],
    )  # fmt: skip
    assert result.exit_code == 3, result.stderr
    *_, last = result.stderr.strip().splitlines()
    # The plan all workers share reads it first: one line, before any worker starts.
    assert last.startswith(f"Error: {path}: corrupt archive at byte offset")
    assert "worker" not in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("sig", "group"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)],
    ids=["sigterm-to-the-parent", "sigint-to-the-parent", "ctrl-c-to-the-group"],
)
def test_a_stopped_workers_run_keeps_its_results_and_exits_130(
    tmp_path: Path, sig: int, group: bool
) -> None:
    """2,000 requests over 20 s; a stop after 2 s of sending, to the parent alone (as a
    process manager sends it) or to its whole group (a terminal's Ctrl-C): every
    worker stops once, cleanly, and the parent merges what they sent."""
    _archive(tmp_path / "a.msgpack", 2000)
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    with sim_process(["--profile", "fast", "--max-num-seqs", "512"]) as sim:
        args = [str(tmp_path / "a.msgpack"), "--target", sim, "--workers", "2"]
        args += ["--out", str(out), "--json", str(summary)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "tailreplay", "replay", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert proc.stderr is not None
        for line in proc.stderr:  # the workers' first progress: they are sending
            if "due " in line:
                break
        time.sleep(1)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        stopped = time.monotonic()
        stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - stopped < 20  # a clean stop, not the schedule's end
    assert "Traceback" not in err and "stopping now" not in err  # one stop, not two
    data = json.loads(summary.read_text())
    assert data["interrupted"] is True and data["scheduled"] == 2000
    assert 0 < data["sent"] < 2000 and data["unsent"] == 2000 - data["sent"]
    assert len(list(ArchiveReader([out]))) == data["sent"]
    assert stdout.startswith(f"interrupted after {data['due']:,} of 2,000 due; ")


def test_workers_whose_parent_is_killed_stop_without_a_traceback(tmp_path: Path) -> None:
    """SIGKILL to the parent (an OOM kill): each worker gets SIGTERM from the kernel,
    stops cleanly and, finding no parent to tell, ends without a word of Python."""
    _archive(tmp_path / "a.msgpack", 2000)
    with sim_process(["--profile", "fast", "--max-num-seqs", "512"]) as sim:
        args = [str(tmp_path / "a.msgpack"), "--target", sim, "--workers", "2"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "tailreplay", "replay", *args, "--out", str(tmp_path / "r")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        for line in proc.stderr:
            if "due " in line:
                break
        proc.kill()
        killed = time.monotonic()
        err = proc.stderr.read()  # to its end: every worker has closed the pipe
        proc.wait(timeout=10)
    assert time.monotonic() - killed < 30
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
