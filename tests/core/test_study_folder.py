"""A study's output folder: one run writing in it, and a previous run's files never
replaced unasked (capacity and validate-model, through the command line)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.errors import UsageError
from tailreplay.study_folder import check_folder, claimed_folder
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9


def test_a_new_folder_is_made_private_and_held_for_one_run(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    with claimed_folder(folder, overwrite=False) as held:
        assert held == folder
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        with (
            pytest.raises(UsageError, match="another run is writing there"),
            claimed_folder(folder, overwrite=True),
        ):
            pass
        (folder / "window.msgpack").write_bytes(b"x")
    # Released: the next run may take it, asked to replace what is there.
    with claimed_folder(folder, overwrite=True):
        pass


def test_a_previous_runs_files_are_refused_unless_overwrite(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    folder.mkdir()
    for name in ("a.msgpack", "b.msgpack", "c.msgpack", "d.msgpack"):
        (folder / name).write_bytes(b"x")
    with pytest.raises(UsageError) as caught:
        check_folder(folder, overwrite=False)
    assert str(caught.value) == (
        f"--out-dir {folder} holds a previous run's files (a.msgpack, b.msgpack, "
        "c.msgpack, ...); pass --overwrite to replace them, or give another folder"
    )
    check_folder(folder, overwrite=True)
    # The lock file alone is no previous run's output.
    other = tmp_path / "empty"
    other.mkdir()
    (other / ".lock").write_bytes(b"")
    check_folder(other, overwrite=False)


def test_a_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"x")
    with pytest.raises(UsageError, match=r"--out-dir .*file/sub: Not a directory"):
        check_folder(blocker / "sub", overwrite=False)


@pytest.mark.parametrize("command", ["capacity", "validate-model"])
def test_a_rerun_into_the_same_folder_is_refused_before_any_replay(
    tmp_path: Path, command: str
) -> None:
    archive = write_plain(
        tmp_path / "w.msgpack",
        [{"start_ns": T0 + i * 3 * 10**9, "method": "POST", "path": "/v1/chat/completions",
          "input_tokens": 10, "output_tokens": 2} for i in range(40)],
    )  # fmt: skip
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "window.msgpack").write_bytes(b"the last run's window")
    if command == "capacity":
        args = ["capacity", str(archive), "--slo", "latency:p99<=1s", "--out-dir", str(folder)]
    else:
        model = tmp_path / "m.json"
        fitted = CliRunner().invoke(cli, ["traces", "fit", str(archive), "-o", str(model)])
        assert fitted.exit_code == 0, fitted.output
        args = ["traces", "validate-model", str(archive), "--model", str(model),
                "--out-dir", str(folder)]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "holds a previous run's files (window.msgpack); pass --overwrite" in result.output
    assert (folder / "window.msgpack").read_bytes() == b"the last run's window"
    assert sorted(os.listdir(folder)) in (["window.msgpack"], [".lock", "window.msgpack"])
