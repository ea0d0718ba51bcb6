"""``traces export jsonl`` of records no JSON object can hold as they are: a map key
that is not a string (msgpack allows bytes), a number JSON has no word for."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9


def _export(src: Path, out: Path, *flags: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["traces", "export", "jsonl", *flags, str(src), "-o", str(out)]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output
    return result.exit_code, result.stderr


def _strict_json(line: str) -> Any:
    def refuse(word: str) -> None:
        raise ValueError(f"{word} is not JSON")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize(
    "hostile",
    [{b"\x00\xffkey": 1}, {"extra": {b"inner": 2}}, {"extra": [{b"deep": 3}]}],
    ids=["binary-key", "nested-binary-key", "binary-key-in-a-list"],
)
def test_a_key_that_is_not_a_string_is_damage_one_line_or_skipped(
    tmp_path: Path, hostile: dict[Any, Any]
) -> None:
    maps = [{"start_ns": T0 + i, "path": f"/v1/{i}"} for i in range(3)]
    maps[1].update(hostile)
    src, out = write_plain(tmp_path / "a.msgpack", maps), tmp_path / "o.jsonl"
    code, err = _export(src, out)
    assert code == 3, err
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: ") and "record 2" in line and "not a string" in line
    assert "--skip-corrupt" in line
    assert not out.exists()  # nothing half-written
    code, err = _export(src, out, "--skip-corrupt")
    assert code == 0 and "warning:" in err and re.search(r"\b1 (damaged )?record", err), err
    assert [_strict_json(x)["path"] for x in out.read_text().splitlines()] == ["/v1/0", "/v1/2"]


def test_numbers_json_cannot_spell_are_null_and_every_line_is_strict_json(tmp_path: Path) -> None:
    maps = [{"start_ns": T0, "extra": [math.nan, math.inf, -math.inf, 1.5], "x": {"y": b"\x01"}}]
    src, out = write_plain(tmp_path / "a.msgpack", maps), tmp_path / "o.jsonl"
    code, err = _export(src, out)
    assert code == 0, err
    obj = _strict_json(out.read_text())
    assert obj["extra"] == [None, None, None, 1.5] and obj["x"] == {"y": "01"}


def test_a_mooncake_session_of_odd_digits_stays_a_string(tmp_path: Path) -> None:
    sessions = ["²3", "9" * 5000, "42"]
    maps = [{"start_ns": T0 + i, "session": s} for i, s in enumerate(sessions)]
    src, out = write_plain(tmp_path / "a.msgpack", maps), tmp_path / "o.jsonl"
    result = CliRunner().invoke(cli, ["traces", "export", "mooncake", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    got = [json.loads(line)["session_id"] for line in out.read_text().splitlines()]
    assert got == ["²3", "9" * 5000, 42]
