"""A replay's result archive has one writer, and an existing one is replaced only with
``--overwrite`` (``tailreplay/result_file.py``): real replays started together with one
``--out`` leave one whole result and one refusal; without ``--out`` they take distinct
names."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.errors import UsageError
from tailreplay.result_file import claimed
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import chat_archive

RECORDS = 12
TRIES = 20
REFUSED = (
    "another replay is writing it; give another name",  # while the other runs
    "exists; give another name, or --overwrite to replace it",  # after it ended
)


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with sim_process(["--profile", "fast", "--max-num-seqs", "256"]) as url:
        yield url


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "a.msgpack"
    chat_archive(path, RECORDS, gap_ms=5, seed=3)
    return path


def _together(args: list[str], cwd: Path) -> list[tuple[int, str]]:
    """Two ``replay ARGS`` processes started at once: each one's exit code and stderr."""
    cmd = [sys.executable, "-m", "tailreplay", "replay", *args]
    procs = [
        subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    out = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        out.append((proc.returncode, err))
    return out


def _whole(path: Path) -> int:
    """The records of ``path``, read strictly (damage anywhere raises)."""
    return sum(1 for _ in ArchiveReader([path]))


def test_two_replays_given_one_out_leave_one_whole_result(
    tmp_path: Path, archive: Path, sim: str
) -> None:
    out = tmp_path / "r.msgpack"
    args = ["--speed", "20x", "--target", sim, "--no-preflight", "--out", str(out), str(archive)]
    started = time.monotonic()
    for attempt in range(TRIES):
        out.unlink(missing_ok=True)
        codes = sorted(_together(args, tmp_path))
        (won, _), (lost, lost_err) = codes
        assert (won, lost) == (0, 2), (attempt, codes)
        last = lost_err.strip().splitlines()[-1]
        assert last.startswith(f"Error: --out {out}: ") and last.endswith(REFUSED), last
        assert "Traceback" not in lost_err
        assert _whole(out) == RECORDS, attempt
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    print(f"{TRIES} pairs in {time.monotonic() - started:.1f} s")


def test_two_replays_without_out_write_distinct_files(
    tmp_path: Path, archive: Path, sim: str
) -> None:
    args = ["--speed", "20x", "--target", sim, "--no-preflight", str(archive)]
    for _ in range(3):
        codes = _together(args, tmp_path)
        assert [code for code, _ in codes] == [0, 0], codes
    made = sorted((tmp_path / "replays").iterdir())
    assert len(made) == 6
    assert all(_whole(p) == RECORDS for p in made)


def test_an_existing_result_is_replaced_only_with_overwrite(tmp_path: Path, archive: Path) -> None:
    out = tmp_path / "r.msgpack"

    def dry(*extra: str) -> tuple[int, str]:
        result = CliRunner().invoke(
            cli, ["replay", "--dry-run", "--out", str(out), *extra, str(archive)]
        )
        return result.exit_code, result.stderr

    assert dry("--limit", "5")[0] == 0
    before = out.read_bytes()
    code, err = dry("--limit", "3")
    assert code == 2 and err.strip().splitlines()[-1] == (
        f"Error: --out {out}: exists; give another name, or --overwrite to replace it"
    )
    assert out.read_bytes() == before
    # A run refused after claiming the file leaves what it held.
    code, err = dry("--limit", "3", "--overwrite", "--from", "+1h")
    assert code != 0 and "Traceback" not in err
    assert out.read_bytes() == before
    code, err = dry("--limit", "3", "--overwrite")
    assert code == 0, err
    assert _whole(out) == 3
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_a_result_held_by_a_run_is_refused_even_with_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "r.msgpack"
    with claimed(out) as held:
        assert held == out and out.exists()
        for overwrite in (False, True):
            with (
                pytest.raises(UsageError, match="another replay is writing it"),
                claimed(out, overwrite=overwrite),
            ):
                pass
    with claimed(out, overwrite=True):  # released: replaceable now
        pass
    assert out.exists()  # taken as it was, not created: never removed


def test_a_claim_refused_or_failed_before_writing_leaves_no_file(tmp_path: Path) -> None:
    out = tmp_path / "r.msgpack"
    with pytest.raises(RuntimeError), claimed(out):
        raise RuntimeError("refused after the claim")
    assert not out.exists()
    link = tmp_path / "link.msgpack"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="symbolic link"), claimed(link, overwrite=True):
        pass
    assert not os.path.exists(tmp_path / "elsewhere")
