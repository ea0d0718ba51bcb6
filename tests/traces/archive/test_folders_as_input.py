"""A folder where archives are taken: the proxy writes one, so every command that
reads archives takes one, its archives read in the order the proxy wrote them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.folders import expand_folders
from tailreplay.traces.archive.format import rotated_name
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9


def _records(first: int, n: int) -> list[dict[str, Any]]:
    return [
        {
            "start_ns": T0 + (first + i) * 10**8,
            "trace_id": (first + i).to_bytes(16, "big"),
            "method": "POST",
            "path": "/v1/chat/completions",
            "status": 200,
            "duration_ns": 10**8,
            "input_tokens": 30,
            "output_tokens": 5,
        }
        for i in range(n)
    ]


def _capture_folder(tmp_path: Path) -> Path:
    """A proxy's folder: two rotated files (the later one written first), a note and
    a sub-folder."""
    folder = tmp_path / "captures"
    folder.mkdir()
    second = folder / rotated_name("capture", T0 + 10**9, 1, compress=False)
    first = folder / rotated_name("capture", T0, 0, compress=False)
    write_plain(second, _records(10, 7))
    write_plain(first, _records(0, 10))
    (folder / "README.txt").write_text("not an archive")
    (folder / "old").mkdir()
    return folder


def test_a_folder_is_its_archives_in_the_order_written(tmp_path: Path) -> None:
    folder = _capture_folder(tmp_path)
    paths = expand_folders([folder])
    assert [p.name for p in paths] == sorted(p.name for p in folder.glob("*.msgpack"))
    starts = [r.start_ns for r in ArchiveReader(paths)]
    assert starts == sorted(starts) and len(starts) == 17


def test_stats_replay_and_report_take_a_folder(tmp_path: Path) -> None:
    folder = _capture_folder(tmp_path)
    runner = CliRunner()
    stats = runner.invoke(cli, ["traces", "stats", "--json", str(folder)])
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.stdout)["records"] == 17
    out = tmp_path / "dry.msgpack"
    replay = runner.invoke(cli, ["replay", "--dry-run", "--out", str(out), str(folder)])
    assert replay.exit_code == 0, replay.output
    assert len(list(ArchiveReader([out]))) == 17
    report = runner.invoke(cli, ["report", str(out), "--recorded", str(folder)])
    assert report.exit_code == 0, report.output


def test_a_folder_without_archives_is_one_line_and_exit_3(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    result = CliRunner().invoke(cli, ["traces", "stats", str(empty)])
    assert result.exit_code == 3
    assert result.stderr.strip() == (
        f"Error: {empty}: a folder with no archive in it (*.msgpack, *.msgpack.zst)"
    )


def test_inspect_which_shows_one_file_names_the_folder_as_such(tmp_path: Path) -> None:
    folder = _capture_folder(tmp_path)
    result = CliRunner().invoke(cli, ["traces", "inspect", str(folder)])
    assert result.exit_code == 3
    assert result.stderr.strip() == (
        f"Error: {folder}: is a directory; inspect shows one archive: give one of the files "
        "in it (traces stats, replay and report take the folder)"
    )
