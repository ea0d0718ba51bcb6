"""Fuzzing: hostile archives against every command that reads them.

Properties, for every archive the strategies in ``archive_strategies.py`` make
(plain or zstd-compressed, damaged as bytes or as zstd frames, bombs included): no
traceback, no command past 30 s, peak RSS under 512 MB, only documented exit codes
(0, or 3 with one line), and one verdict from every command — damaged or not, and,
when not, the same number of records (``traces peak`` and ``traces fit`` count no
records: they must call damage what the others call damage, and only that). For
archives whose bytes are intact the verdict is also known in advance: a record or
header field outside ``traces/archive/validate.py`` is damage, and
``--skip-corrupt`` reads exactly the valid records.

``make test`` runs a short budget (30 archives in-process, 5 in child processes);
``make fuzz`` sets TAILREPLAY_FUZZ_EXAMPLES=2800 (a twentieth of them in child
processes too, one command each) and TAILREPLAY_FUZZ_TABLE to a file that receives
the table of what ran (docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tailreplay.cli import cli
from tailreplay.errors import TailreplayError
from tailreplay.traces.archive.reader import ArchiveReader
from tests.archive_strategies import Archive, archives
from tests.helpers import HEADER, deadline, one_verdict, run_measured, write_plain

EXAMPLES = int(os.environ.get("TAILREPLAY_FUZZ_EXAMPLES", "0")) or None
DEADLINE_S = 30
MAX_RSS_MB = 512
EXIT_CODES = (0, 1, 2, 3, 130)  # docs: success, failed run, usage, bad input, interrupted
FUZZ = settings(
    max_examples=EXAMPLES or 30,
    # Not explain: it replays a failing example under a line tracer, which took a
    # replay past DEADLINE_S and reported that in place of the failure found.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)  # fmt: skip
CLI_BASE_MB = 100
"""Resident memory of a command in its own process before it reads (its imports)."""
INSPECT_N = 1000
"""``inspect -n``: a bomb holds more records than it prints, and then it sees no damage."""

_Count = Callable[[Result], int]


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found is not None, (pattern, text[-2000:])
    return int(found[1].replace(",", ""))


def _idle_calls(text: str) -> int:
    """The calls that generate nothing a report counts apart ("(and 2 calls that ...")."""
    found = re.search(r"and ([\d,]+) calls? that generates? nothing", text)
    return int(found[1].replace(",", "")) if found else 0


def _refused(text: str) -> int:
    """The records a replay leaves out as impossible to rebuild (POSTs to routes no
    dialect serves, captured without bodies), all of them or some."""
    found = re.search(r"([\d,]+) (?:records left out: )?POSTs to routes no dialect", text)
    return int(found[1].replace(",", "")) if found else 0


def _left_out(text: str) -> int:
    """The calls that generate nothing a Mooncake export leaves out ("(2 calls ...")."""
    found = re.search(r"\(([\d,]+) calls? that generates? nothing left out", text)
    return int(found[1].replace(",", "")) if found else 0


_KEEP_COPIES = frozenset({"inspect", "merge", "slice", "export-jsonl"})
"""Commands that read a capture's shadow copies (``shadow_of``); the others read
production's records alone (docs/shadow.md)."""


def _copies(path: Path, skip: bool) -> int:
    """The shadow copies a reader finds in ``path`` (0 when it cannot read it)."""
    try:
        return sum(1 for _ in ArchiveReader([path], skip_corrupt=skip, shadows="only"))
    except TailreplayError:
        return 0


# Commands whose output tells how many records they read, and how.
_COUNT: dict[str, _Count] = {
    "stats": lambda r: int(json.loads(r.stdout)["records"]),
    "inspect": lambda r: sum(1 for line in r.stdout.splitlines() if line.startswith("record ")),
    "merge": lambda r: _number(r"wrote ([\d,]+) records", r.stderr),
    "slice": lambda r: _number(r"wrote ([\d,]+) records", r.stderr),
    "export-jsonl": lambda r: _number(r"exported ([\d,]+) records", r.output),
    "export-mooncake": lambda r: (
        _number(r"exported ([\d,]+) records", r.output) + _left_out(r.output)
    ),
    "replay": lambda r: (
        _number(r"dry run: ([\d,]+) requests", r.stdout)
        + _idle_calls(r.stdout)
        + _refused(r.output)
    ),
    "report": lambda r: (
        _number(r"(?:recorded|replayed) ([\d,]+) requests", r.stdout) + _idle_calls(r.stdout)
    ),
}


def _commands(path: Path, out: Path, skip: list[str]) -> dict[str, list[str]]:
    return {
        "stats": ["traces", "stats", "--json", *skip, str(path)],
        "inspect": ["traces", "inspect", "-n", str(INSPECT_N), *skip, str(path)],
        "merge": ["traces", "merge", *skip, "-o", str(out / "merged.msgpack"), str(path)],
        "slice": ["traces", "slice", *skip, "-o", str(out / "sliced.msgpack"), str(path)],
        "peak": ["traces", "peak", "--window", "10s", *skip, "-o", str(out / "p.msgpack"),
                 str(path)],
        "export-jsonl": ["traces", "export", "jsonl", *skip, "-o", str(out / "e.jsonl"),
                         str(path)],
        "export-mooncake": ["traces", "export", "mooncake", *skip, "-o", str(out / "m.jsonl"),
                            str(path)],
        "fit": ["traces", "fit", *skip, "-o", str(out / "model.json"), str(path)],
        "replay": ["replay", "--dry-run", *skip, "--out", str(out / "dry.msgpack"), str(path)],
        "report": ["report", "--replay-only", *skip, str(path)],
    }  # fmt: skip


@dataclass
class _Row:
    """What one command did over the whole run (the table ``make fuzz`` prints)."""

    runs: int = 0
    tracebacks: int = 0
    max_s: float = 0.0
    max_rss_mb: float = 0.0
    codes: Counter[int] = field(default_factory=Counter)
    child_runs: int = 0
    child_max_s: float = 0.0
    child_max_rss_mb: float = 0.0


_TABLE: dict[str, _Row] = {}
_KINDS: Counter[str] = Counter()
_DISTINCT: set[bytes] = set()


@pytest.fixture(scope="module", autouse=True)
def _table() -> Iterator[None]:
    yield
    target = os.environ.get("TAILREPLAY_FUZZ_TABLE")
    if target and _TABLE:
        Path(target).write_text(_markdown())


def _markdown() -> str:
    lines = [
        f"{sum(_KINDS.values()):,} archives, {len(_DISTINCT):,} of them distinct (each run "
        "with and without --skip-corrupt); "
        "in-process RSS: what the command added to the test process's resident memory "
        "at its peak (VmHWM during it minus VmRSS before it); own process: the "
        "command's peak RSS alone (VmHWM), one command per archive for a twentieth "
        "of them, each with and without --skip-corrupt.",
        "",
        "| command | runs | tracebacks | max s | max RSS added MB | own-process runs "
        "| max s | max RSS MB | exit codes seen |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in sorted(_TABLE.items()):
        codes = ", ".join(f"{c}: {n:,}" for c, n in sorted(row.codes.items()))
        lines.append(
            f"| {name} | {row.runs:,} | {row.tracebacks} | {row.max_s:.1f} | "
            f"{row.max_rss_mb:.0f} | {row.child_runs} | {row.child_max_s:.1f} | "
            f"{row.child_max_rss_mb:.0f} | {codes} |"
        )
    lines += ["", "| mutation | archives |", "|---|---:|"]
    lines += [f"| {kind} | {n:,} |" for kind, n in sorted(_KINDS.items())]
    return "\n".join(lines) + "\n"


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM back to the current RSS
        return True
    except OSError:
        return False


def _rss_mb(field: str = "VmHWM") -> float:
    """This process's peak (VmHWM) or current (VmRSS) resident memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _verdict(name: str, result: Result, path: Path) -> int | str:
    """The record count a command read, "damaged", or for a command that counts none
    "ok"/"error"; fails on any other outcome. An error that names the file is the
    reader's (damage, or no archive at all); others are the command's own."""
    what = f"{name}: {result.output[-2000:]}"
    row = _TABLE[name]
    row.codes[result.exit_code] += 1
    if "Traceback" in result.output or not isinstance(result.exception, SystemExit | None):
        row.tracebacks += 1
    error = one_verdict(result, what)
    if error is not None:
        if name == "replay" and "no records to replay" in error:
            return _refused(error)
        if name == "replay" and "could not be written (a value no archive holds)" in error:
            # Read whole; a result stamped from now past the archive clock's end (a
            # record at its last nanoseconds) is lost, and said so (exit 3).
            return _COUNT[name](result)
        if name not in _COUNT and not error.startswith(f"Error: {path}: "):
            return "error"  # peak, fit: too few records for what they do
        return "damaged"
    if name not in _COUNT:
        return "ok"
    return _COUNT[name](result)


def _agree(verdicts: dict[str, int | str], copies: int) -> set[int | str]:
    """The verdicts that must be one: every count (an inspect that printed all it may
    print has not read to the end; a command that leaves shadow copies out counted
    with them) and "damaged"; "ok"/"error" only where no other command saw damage."""
    counted = {
        v + copies if isinstance(v, int) and name not in _KEEP_COPIES else v
        for name, v in verdicts.items()
        if name in _COUNT and not (name == "inspect" and v == INSPECT_N)
    }
    if "damaged" in counted:
        counted |= {v for v in verdicts.values() if v in ("ok", "error")}
    else:
        counted |= {v for v in verdicts.values() if v == "damaged"}
    return counted


def _run_all(archive: Archive, tmp: Path, skip: bool, rss: bool) -> dict[str, int | str]:
    for f in tmp.iterdir():
        f.unlink()
    path = tmp / ("in.msgpack.zst" if archive.compressed else "in.msgpack")
    path.write_bytes(archive.data)
    verdicts = {}
    for name, args in _commands(path, tmp, ["--skip-corrupt"] if skip else []).items():
        row = _TABLE.setdefault(name, _Row())
        if rss:
            _reset_peak_rss()
            before = _rss_mb("VmRSS")
        start = time.monotonic()
        with deadline(DEADLINE_S, name):
            result = CliRunner().invoke(cli, args)
        row.runs += 1
        row.max_s = max(row.max_s, time.monotonic() - start)
        if rss:
            # What the command added to this process's memory at its peak.
            grew = _rss_mb() - before
            row.max_rss_mb = max(row.max_rss_mb, grew)
            assert grew < MAX_RSS_MB - CLI_BASE_MB, (name, grew, archive.damage)
        verdicts[name] = _verdict(name, result, path)
    return verdicts


@FUZZ
@given(archive=archives())
def test_every_command_reaches_one_verdict(tmp_path: Path, archive: Archive) -> None:
    tmp = tmp_path / "run"
    tmp.mkdir(exist_ok=True)
    _KINDS[archive.mutation] += 1
    _DISTINCT.add(hashlib.sha256(archive.data).digest())
    rss = _reset_peak_rss()
    for skip in (False, True):
        verdicts = _run_all(archive, tmp, skip, rss)
        copies = _copies(next(tmp.glob("in.msgpack*")), skip)
        assert len(_agree(verdicts, copies)) == 1, (skip, archive.damage, copies, verdicts)
        if not archive.damage:  # intact bytes: the verdict is known in advance
            clean = archive.header_ok and archive.valid == archive.records
            want: int | str = archive.valid if skip or clean else "damaged"
            stats = verdicts["stats"]
            got = stats + copies if isinstance(stats, int) else stats
            assert got == want, (skip, verdicts, archive)


@settings(FUZZ, max_examples=(EXAMPLES or 100) // 20)
@given(archive=archives(), command=st.sampled_from(sorted(_commands(Path(), Path(), []))))
def test_commands_in_their_own_process(tmp_path: Path, archive: Archive, command: str) -> None:
    tmp = tmp_path / "child"
    tmp.mkdir(exist_ok=True)
    path = tmp / ("in.msgpack.zst" if archive.compressed else "in.msgpack")
    path.write_bytes(archive.data)
    row = _TABLE.setdefault(command, _Row())
    for skip in ([], ["--skip-corrupt"]):
        for f in tmp.iterdir():
            if f != path:
                f.unlink()
        args = _commands(path, tmp, skip)[command]
        start = time.monotonic()
        code, err, rss = run_measured(args, tmp, timeout_s=DEADLINE_S)
        row.child_runs += 1
        row.child_max_s = max(row.child_max_s, time.monotonic() - start)
        row.child_max_rss_mb = max(row.child_max_rss_mb, rss)
        assert code in EXIT_CODES and code in (0, 3) and "Traceback" not in err, (args, err)
        assert rss < MAX_RSS_MB, (args, rss)


def test_export_jsonl_writes_an_unknown_field_that_holds_bytes_in_a_map(tmp_path: Path) -> None:
    # What the fuzz found: a key this version does not know, holding a map with bytes.
    # Bytes values are written in hex; a key that is not a string is damage (JSON has none).
    path = tmp_path / "in.msgpack"
    write_plain(path, [{"start_ns": 1, "a_future_field": {"k": b"\x01", "l": [b"\x03"]}}])
    args = ["traces", "export", "jsonl", "-o", str(tmp_path / "o")]
    result = CliRunner().invoke(cli, [*args, str(path)])
    assert result.exit_code == 0, result.output
    line = json.loads((tmp_path / "o").read_text())
    assert line["a_future_field"] == {"k": "01", "l": ["03"]}
    write_plain(path, [{"start_ns": 1, "a_future_field": {b"\x02": 1}}])
    refused = CliRunner().invoke(cli, [*args, str(path)])
    assert refused.exit_code == 3 and len(refused.stderr.strip().splitlines()) == 1


def test_an_unknown_field_nested_past_32_levels_is_damage_to_every_reader(
    tmp_path: Path,
) -> None:
    # What the fuzz found: 500 levels made `export jsonl` (and 1,000 `inspect`) overflow
    # Python's stack; the C scanner already stopped past 32.
    for depth, code in ((32, 0), (33, 3), (1000, 3)):
        path = tmp_path / f"deep{depth}.msgpack"
        path.write_bytes(
            msgpack.packb(HEADER) + b"\x82\xa8start_ns\x01\xa1x" + b"\x91" * depth + b"\x00"
        )
        for args in (["stats"], ["inspect"], ["export", "jsonl", "-o", str(tmp_path / "o")]):
            result = CliRunner().invoke(cli, ["traces", *args, str(path)])
            assert result.exit_code == code, (depth, args, result.output[-300:])
            assert code == 0 or "nests arrays and maps deeper than 32 levels" in result.stderr
    # The same in a header: damage, or with --skip-corrupt a field left out.
    path = tmp_path / "deep-header.msgpack"
    head = msgpack.packb({**HEADER, "y": 0})[:-1] + b"\x91" * 1000 + b"\x00"
    path.write_bytes(head + msgpack.packb({"start_ns": 1}))
    for skip, code in (([], 3), (["--skip-corrupt"], 0)):
        result = CliRunner().invoke(cli, ["traces", "inspect", *skip, str(path)])
        assert result.exit_code == code and "y nests arrays and maps" in result.stderr
