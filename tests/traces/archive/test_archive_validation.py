"""One validation: every command that reads archives agrees on what is damaged.

A record is damaged when a field holds a value of the wrong type or outside its
range (docs/archive-format.md, "Valid values"); a header when an optional field
does. Without ``--skip-corrupt`` that is exit 3 and one line naming the file, the
byte offset and the record; with it, the record is skipped (or the header field
ignored) and counted in a warning — in every command alike.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zstandard
from click.testing import CliRunner, Result

from tailreplay.cli import cli
from tailreplay.errors import ArchiveCorrupt
from tailreplay.traces.archive import columns, validate
from tailreplay.traces.archive import format as fmt
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.validate import record_problem, target_ok, token_ok
from tests.helpers import HEADER, write_plain

T0 = 1_700_000_000 * 10**9
GOOD: dict[str, Any] = {
    "start_ns": T0,
    "duration_ns": 120 * 10**6,
    "status": 200,
    "method": "POST",
    "path": "/v1/chat/completions",
    "input_tokens": 50,
    "output_tokens": 7,
}


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _commands(path: Path, tmp: Path, skip: bool) -> dict[str, list[str]]:
    flag = ["--skip-corrupt"] if skip else []
    for name in ("m.msgpack", "s.msgpack", "d.msgpack"):
        (tmp / name).unlink(missing_ok=True)
    return {
        "stats": ["traces", "stats", "--json", *flag, str(path)],
        "inspect": ["traces", "inspect", "-n", "1000", *flag, str(path)],
        "merge": ["traces", "merge", *flag, "-o", str(tmp / "m.msgpack"), str(path)],
        "slice": ["traces", "slice", *flag, "-o", str(tmp / "s.msgpack"), str(path)],
        "replay": ["replay", "--dry-run", *flag, "--out", str(tmp / "d.msgpack"), str(path)],
        "report": ["report", "--replay-only", *flag, str(path)],
    }


def _records_read(name: str, result: Result) -> int:
    if name == "stats":
        return int(json.loads(result.stdout)["records"])
    if name == "inspect":
        return sum(1 for line in result.stdout.splitlines() if line.startswith("record "))
    pattern = {
        "merge": r"wrote (\d+) records",
        "slice": r"wrote (\d+) records",
        "replay": r"dry run: (\d+) requests",
        "report": r"(?:recorded|replayed) (\d+) requests",
    }[name]
    found = re.search(pattern, result.output)
    assert found, (name, result.output)
    return int(found[1])


# (field, bad value, what the error says about it)
PAIRS = "'req_headers' must be an array of [name, value] pairs (a token, no CR, LF or NUL)"
METHOD = "'method' must be an HTTP token (a method)"
TARGET = "'path' must be a request target (\"/\" then no space or control character)"
BAD_VALUES = [
    ("output_tokens", "12", "'output_tokens' must be an int in 0..2^32-1 (got str)"),
    ("output_tokens", math.nan, "'output_tokens' must be an int in 0..2^32-1 (got nan)"),
    ("output_tokens", 2**64 - 1, "'output_tokens' must be an int in 0..2^32-1 (got 1844674407"),
    ("input_tokens", -1, "'input_tokens' must be an int in 0..2^32-1 (got -1)"),
    ("input_tokens", 2**32, "'input_tokens' must be an int in 0..2^32-1"),
    ("max_tokens", True, "'max_tokens' must be an int in 0..2^32-1 (got bool)"),
    ("duration_ns", math.inf, "'duration_ns' must be an int in 0..2^62-1 (got inf)"),
    ("duration_ns", -5, "'duration_ns' must be an int in 0..2^62-1 (got -5)"),
    ("start_ns", 2**62, "'start_ns' must be an int in 0..2^62-1"),
    ("start_ns", None, "no start_ns"),
    ("lag_ns", -(2**62), "'lag_ns' must be an int in -2^62+1..2^62-1"),
    ("status", 1000, "'status' must be an int in 0..999 (got 1000)"),
    ("req_headers", [1, 2, 3], PAIRS),
    ("req_headers", "accept: */*", f"{PAIRS} (got str)"),
    ("req_headers", [["accept"]], PAIRS),
    ("req_headers", [["accept", 5]], PAIRS),
    ("req_headers", [["accept", "*/*\r\nX-Injected: 1"]], PAIRS),
    ("req_headers", [["x y", "1"]], PAIRS),
    (
        "method",
        "GET / HTTP/1.1\r\nHost: evil\r\n\r\nDELETE",
        f"{METHOD} (got 'GET / HTTP/1.1\\r\\n",
    ),
    ("method", "", f"{METHOD} (got '')"),
    ("path", "http://169.254.169.254/latest", f"{TARGET} (got 'http://169.254"),
    ("path", "@evil.example/x", f"{TARGET} (got '@evil"),
    ("path", "//evil.example/x", f"{TARGET} (got '//evil"),
    ("path", "/x HTTP/1.1\r\nHost: evil", f"{TARGET} (got '/x HTTP/1.1\\r\\nHost"),
    ("path", "/\x1b]52;c;aGk=\x07", f"{TARGET} (got '/\\x1b]52"),
    ("trace_id", b"abc", "'trace_id' must be bin of 16 bytes (got 3 bytes)"),
    ("span_id", "0102030405060708", "'span_id' must be bin of 8 bytes (got str)"),
    ("chunk_gaps_us", [5, -1], "'chunk_gaps_us' must be an array of ints in 0..2^62-1"),
    ("chunk_gaps_us", [1.5], "'chunk_gaps_us' must be an array of ints in 0..2^62-1"),
    ("prefix_hashes", [-1], "'prefix_hashes' must be an array of ints in 0..2^64-1"),
    ("stream", 1, "'stream' must be a bool (got 1)"),
    ("model", 5, "'model' must be a str (got 5)"),
    ("req_body", "text", "'req_body' must be bin (got str)"),
]


@pytest.mark.parametrize(("field", "value", "message"), BAD_VALUES, ids=lambda v: repr(v)[:24])
def test_a_damaged_record_is_one_verdict_in_every_command(
    tmp_path: Path, field: str, value: Any, message: str
) -> None:
    bad = {**GOOD, "start_ns": T0 + 1, field: value}
    maps = [GOOD, bad, {**GOOD, "start_ns": T0 + 2}]
    path = write_plain(tmp_path / "a.msgpack", maps)
    offset = len(msgpack.packb(HEADER)) + len(msgpack.packb(GOOD))
    for name, args in _commands(path, tmp_path, skip=False).items():
        result = _invoke(*args)
        assert result.exit_code == 3, (name, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, (name, lines)
        assert lines[0].startswith(
            f"Error: {path}: corrupt archive at byte offset {offset} (record 2: {message}"
        ), (name, lines)
    for name, args in _commands(path, tmp_path, skip=True).items():
        result = _invoke(*args)
        assert result.exit_code == 0, (name, result.output)
        assert _records_read(name, result) == 2, name
        assert (
            f"warning: {path}: skipped 1 damaged record(s) (the first at byte offset "
            f"{offset}: record 2: {message}"
        ) in result.stderr, (name, result.stderr)


EDGES = [
    ("output_tokens", 2**32 - 1),
    ("start_ns", 2**62 - 1),
    ("start_ns", 0),
    ("status", 999),
    ("lag_ns", -(2**62) + 1),
    ("prefix_hashes", [0, 2**64 - 1]),
    ("chunk_gaps_us", []),
    ("req_headers", []),
    ("model", None),  # nil: absent
    ("trace_id", bytes(16)),
    ("a_field_from_a_newer_writer", [math.nan, {"any": ["thing"]}]),
]


@pytest.mark.parametrize(("field", "value"), EDGES, ids=lambda v: repr(v)[:24])
def test_values_at_the_edges_of_their_range_are_valid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: Any
) -> None:
    m = {**GOOD, field: value}
    assert record_problem(m) is None
    path = write_plain(tmp_path / "a.msgpack", [m, {**GOOD, "start_ns": T0 + 5}])
    for name, args in _commands(path, tmp_path, skip=False).items():
        result = _invoke(*args)
        if (name, field, value) == ("replay", "start_ns", 2**62 - 1):
            # Replayed from now, a record at the clock's end is due past it (2116): its
            # result cannot be stamped, and the run says so (exit 3), never silently.
            lost = "1 result could not be written (a value no archive holds)"
            assert result.exit_code == 3 and lost in result.output, result.output
            continue
        assert result.exit_code == 0, (name, result.output)
        assert _records_read(name, result) == 2, name
    # The C scanner takes the file whole, and reads what the Python reader reads.
    fields = ["duration_ns", "status", "input_tokens", "output_tokens"]
    fast = load_columns([path], fields)
    monkeypatch.setattr(columns, "_colscan", None)
    slow = load_columns([path], fields)
    for f in ["start_ns", *fields]:
        np.testing.assert_array_equal(fast[f], slow[f])


BAD_HEADERS = [
    ({"capture": [1, 2]}, "capture must be a map (got list)"),
    ({"capture": {"timeout_s": math.nan}}, "capture.timeout_s must be a finite number"),
    ({"capture": {"timeout_s": math.inf}}, "capture.timeout_s must be a finite number"),
    ({"capture": {"timeout_s": -1}}, "capture.timeout_s must be a finite number"),
    ({"capture": {"sample": "all"}}, "capture.sample must be a finite number in 0..1 (got str)"),
    ({"created_ns": "yesterday"}, "created_ns must be an int in 0..2^63-1 (got str)"),
    ({"ordered": 1}, "ordered must be a bool (got 1)"),
    ({"upstream": 5}, "upstream must be a str (got 5)"),
    ({"tail_stretch": math.nan}, "tail_stretch must be a finite number, 1<=x<=4 (got nan)"),
    ({"inputs": ["a", 1]}, "inputs must be an array of str (got list)"),
]


@pytest.mark.parametrize(("fields", "message"), BAD_HEADERS, ids=lambda v: repr(v)[:30])
def test_a_damaged_header_is_one_verdict_in_every_command(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    maps = [GOOD, {**GOOD, "start_ns": T0 + 1}]
    path = write_plain(tmp_path / "a.msgpack", maps, header={**HEADER, **fields})
    for name, args in _commands(path, tmp_path, skip=False).items():
        result = _invoke(*args)
        assert result.exit_code == 3, (name, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"Error: {path}: damaged header ("), lines
        assert message in lines[0], (name, lines)
    for name, args in _commands(path, tmp_path, skip=True).items():
        result = _invoke(*args)
        assert result.exit_code == 0, (name, result.output)
        assert _records_read(name, result) == 2, name
        assert f"warning: {path}: ignored damaged header fields: " in result.stderr, name


def test_records_of_an_older_reader_s_laxer_days_still_name_the_record(tmp_path: Path) -> None:
    # The record number counts records as stored, so a user can find it with inspect.
    maps = [{**GOOD, "start_ns": T0 + i} for i in range(5)]
    maps[3]["status"] = "200"
    path = write_plain(tmp_path / "a.msgpack", maps)
    with pytest.raises(ArchiveCorrupt, match=r"record 4: 'status' must be an int"):
        list(ArchiveReader([path]))


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (b"\x82\xa8start_ns\x01\xa4path\xa2\xc3\x28", "invalid UTF-8 in a known field"),
        (b"\x82\xa8start_ns\x01\xa1x\xa2\xc3\x28", "invalid UTF-8 in an unknown field"),
        (b"\x82\xa8start_ns\x01\xa1x\x81\x05\x00", "an int map key"),
        (b"\x82\xa8start_ns\x01\xa1x\xd4\x05\x00", "an ext type"),
        (
            b"\x82\xa8start_ns\x01\xa1x" + b"\x91" * 40 + b"\x00",
            "nesting past the C scanner's depth",
        ),
        (b"\x82\xa8start_ns\x01\xa1x\x81\xc4\x01k\x00", "a bin map key, nested"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_the_c_scanner_reaches_the_python_verdict_on_unusual_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: bytes, why: str
) -> None:
    good = msgpack.packb(GOOD)
    path = tmp_path / "a.msgpack"
    path.write_bytes(msgpack.packb(HEADER) + good + record + good)

    def verdict(skip: bool) -> tuple[int, list[str]] | str:
        try:
            cols = load_columns([path], ["status"], skip_corrupt=skip)
        except ArchiveCorrupt as exc:
            return str(exc)
        return cols.n, cols.warnings

    fast = [verdict(False), verdict(True)]
    monkeypatch.setattr(columns, "_colscan", None)
    assert fast == [verdict(False), verdict(True)], why


def test_a_record_past_the_object_limit_is_damage_not_a_memory_blow_up(tmp_path: Path) -> None:
    # Two million empty arrays are 2 MB on disk and ~130 MB as Python lists: past the
    # limit the reader stops building them.
    n = fmt.MAX_RECORD_OBJECTS + 1
    bomb = b"\x82\xa8start_ns\x01\xa1x\xdd" + n.to_bytes(4, "big") + b"\x90" * n
    path = tmp_path / "a.msgpack"
    path.write_bytes(msgpack.packb(HEADER) + msgpack.packb(GOOD) + bomb)
    result = _invoke("traces", "stats", str(path))
    assert result.exit_code == 3
    assert "objects in one record" in result.stderr or "undecodable" in result.stderr
    result = _invoke("traces", "stats", "--json", "--skip-corrupt", str(path))
    assert result.exit_code == 0 and json.loads(result.stdout)["records"] == 1


def test_a_record_over_the_byte_limit_is_damage(tmp_path: Path) -> None:
    half = fmt.MAX_BIN_LEN - 1  # each value under the bin limit, the record over 80 MiB
    # One random byte in 256: it compresses about 70x, not like a bomb.
    body = bytearray(half)
    body[::256] = random.Random(3).randbytes(len(body[::256]))
    big = {**GOOD, "req_body": body, "another_body": body}
    data = msgpack.packb(HEADER) + msgpack.packb(GOOD) + msgpack.packb(big)
    data += msgpack.packb({**GOOD, "start_ns": T0 + 9})
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(data))
    del data, big
    offset = len(msgpack.packb(HEADER)) + len(msgpack.packb(GOOD))
    result = _invoke("traces", "inspect", str(path))
    assert result.exit_code == 3, result.output
    assert f"byte offset {offset} (an object longer than the 80 MiB record limit)" in result.stderr
    result = _invoke("traces", "stats", "--json", "--skip-corrupt", str(path))
    assert result.exit_code == 0 and json.loads(result.stdout)["records"] == 2


def test_an_importer_never_writes_a_record_a_reader_rejects(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [0]},
        {"timestamp": 10, "input_length": 2**40, "output_length": 5, "hash_ids": [1]},
        {"timestamp": 20, "input_length": 300, "output_length": 9, "hash_ids": [2]},
    ]
    src = tmp_path / "trace.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "a.msgpack"
    result = _invoke("traces", "import", "mooncake", str(src), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert f"warning: {src}:2: 'input_tokens' must be an int in 0..2^32-1" in result.stderr
    assert [r.input_tokens for r in ArchiveReader([out])] == [100, 300]
    result = _invoke("traces", "import", "mooncake", "--strict", str(src), "-o", str(out))
    assert result.exit_code == 3
    assert f"{src}:2: 'input_tokens' must be" in result.stderr


def test_a_top_level_key_that_is_not_a_string_is_damage_to_every_reader(tmp_path: Path) -> None:
    path = write_plain(tmp_path / "a.msgpack", [GOOD, {**GOOD, "start_ns": T0 + 1, b"k": 1}])
    for name, args in _commands(path, tmp_path, skip=False).items():
        result = _invoke(*args)
        assert result.exit_code == 3, (name, result.output)
        assert "a key that is not a string (bytes b'k')" in result.stderr, (name, result.stderr)


def test_methods_and_paths_found_good_are_remembered_and_bad_ones_never() -> None:
    # The same answers the second time (from the set of good ones), and a refusal is
    # looked at afresh each time.
    for _ in range(2):
        assert token_ok("POST") and target_ok("/v1/chat/completions?x=1")
        assert not token_ok("PO ST") and not token_ok("") and not token_ok(None)
        assert not target_ok("//evil.example/x") and not target_ok("/a b")
        assert not target_ok("/a\r\nHost: x") and not target_ok(b"/v1")
    assert "//evil.example/x" not in validate._GOOD_TARGETS
    # A file of distinct paths cannot grow the set without bound.
    for i in range(3 * validate._GOOD_MAX):
        assert target_ok(f"/v1/chat/completions?page={i}")
    assert len(validate._GOOD_TARGETS) <= validate._GOOD_MAX
