"""Output files: created 0600, never written through a symlink or into a hard-linked file."""

from __future__ import annotations

import importlib
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tests.helpers import REPO, random_maps, write_plain

PEAK = REPO / "traces" / "peak.msgpack"


def _merge(src: Path, out: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["traces", "merge", str(src), "-o", str(out)])
    return result.exit_code, result.stderr


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "in.msgpack"
    write_plain(path, random_maps(5))
    return path


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Someone else's file, world-readable, that an output path must not touch."""
    path = tmp_path / "victim.txt"
    path.write_text("precious")
    path.chmod(0o644)
    return path


def _untouched(victim: Path) -> bool:
    return victim.read_text() == "precious" and stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_an_output_path_that_is_a_symlink_is_refused(
    tmp_path: Path, archive: Path, victim: Path
) -> None:
    out = tmp_path / "out.msgpack"
    out.symlink_to(victim)
    code, err = _merge(archive, out)
    assert code == 2
    assert err.strip().endswith(f"{out}: is a symbolic link; refusing to write through it")
    assert len(err.strip().splitlines()) == 1
    assert _untouched(victim)


def test_an_output_path_with_another_hard_link_is_refused(
    tmp_path: Path, archive: Path, victim: Path
) -> None:
    out = tmp_path / "out.msgpack"
    os.link(victim, out)
    code, err = _merge(archive, out)
    assert code == 2
    assert "has other hard links; refusing to overwrite it" in err
    assert _untouched(victim)


def test_an_output_file_is_created_0600_and_an_old_one_replaced(
    tmp_path: Path, archive: Path
) -> None:
    out = tmp_path / "out.msgpack"
    out.write_text("old")
    out.chmod(0o644)
    assert _merge(archive, out)[0] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_bytes()[:1] != b"o"


def test_replays_default_folder_is_private(
    tmp_path: Path, archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --out, results go to ./replays/, created 0700 as the proxy's folder is."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["replay", "--dry-run", str(archive)])
    assert result.exit_code == 0, result.stderr
    (out,) = (tmp_path / "replays").iterdir()
    assert stat.S_IMODE((tmp_path / "replays").stat().st_mode) == 0o700
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_a_refused_replay_leaves_no_default_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["replay", "--dry-run", str(tmp_path / "nosuch.msgpack")])
    assert result.exit_code == 3 and "no such file" in result.stderr
    assert not (tmp_path / "replays").exists()


def test_a_whole_file_output_never_replaces_a_fifo_a_link_or_a_shared_file(
    tmp_path: Path, archive: Path, victim: Path
) -> None:
    """Outputs written whole and renamed into place (``--json``, ``traces fit -o``)
    refuse what an archive output refuses: a rename would have replaced the node
    itself (as root, ``--json /dev/null`` made /dev/null a plain file)."""
    fifo, link, hard = tmp_path / "fifo", tmp_path / "link.json", tmp_path / "hard.json"
    os.mkfifo(fifo)
    link.symlink_to(victim)
    os.link(victim, hard)
    for path, says in ((fifo, "is not a plain file"), (link, "is a symbolic link"),
                       (hard, "has other hard links")):  # fmt: skip
        out = str(tmp_path / f"r-{path.name}.msgpack")  # each run's results its own
        result = CliRunner().invoke(cli, ["replay", "--dry-run", "--out", out,
                                          "--json", str(path), str(archive)])  # fmt: skip
        assert result.exit_code == 2 and says in result.stderr, result.stderr
        fit = CliRunner().invoke(cli, ["traces", "fit", str(PEAK), "-o", str(path)])
        assert fit.exit_code == 2 and says in fit.stderr, fit.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink() and _untouched(victim)


def test_replays_started_in_one_second_never_share_a_default_file(
    tmp_path: Path, archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default name counts whole seconds: a second run in the same second takes
    NAME-2 (created exclusively), and a run refused before writing leaves no file."""
    from datetime import UTC, datetime

    from tailreplay.traces.archive.reader import ArchiveReader

    result_file = importlib.import_module("tailreplay.result_file")

    class Frozen(datetime):
        @classmethod
        def now(cls, tz: object = None) -> datetime:  # type: ignore[override]
            return datetime(2026, 12, 3, 8, 37, 40, tzinfo=UTC)

    monkeypatch.setattr(result_file, "datetime", Frozen)
    monkeypatch.chdir(tmp_path)
    outs = []
    for limit in ("5", "3"):
        result = CliRunner().invoke(cli, ["replay", "--dry-run", "--limit", limit, str(archive)])
        assert result.exit_code == 0, result.stderr
        outs.append(result.stdout.split("results: ")[1].strip())
    assert outs == [
        "replays/replay-20261203T083740Z-dry.msgpack",
        "replays/replay-20261203T083740Z-dry-2.msgpack",
    ]
    assert [len(list(ArchiveReader([tmp_path / o]))) for o in outs] == [5, 3]
    assert stat.S_IMODE((tmp_path / outs[1]).stat().st_mode) == 0o600
    refused = CliRunner().invoke(cli, ["replay", "--dry-run", "--from", "+1h", str(archive)])
    assert refused.exit_code != 0 and "Traceback" not in refused.stderr
    assert sorted(p.name for p in (tmp_path / "replays").iterdir()) == sorted(
        Path(o).name for o in outs
    )
