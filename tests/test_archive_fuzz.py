"""Fuzzing: hostile archives against every command that reads them.

Properties, for every archive the strategies in ``archive_strategies.py`` make:
no traceback, no command past 20 s, peak RSS under 500 MB, exit codes 0 or 3
(3 with one line), and one verdict from every command — damaged or not, and, when
not, the same number of records. For archives whose bytes are intact the verdict
is also known in advance: a record or header field outside ``traces/archive/validate.py``
is damage, and ``--skip-corrupt`` reads exactly the valid records.

``make test`` runs a short budget (30 archives in-process, 5 in child processes);
``make fuzz`` sets TAILREPLAY_FUZZ_EXAMPLES=1500 (about 1,070 of them with damaged
bytes, the rest with hostile values; a twentieth of them in child processes too).
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings

from tailreplay.cli import cli
from tests.archive_strategies import Archive, archives
from tests.helpers import run_measured

EXAMPLES = int(os.environ.get("TAILREPLAY_FUZZ_EXAMPLES", "0")) or None
DEADLINE_S = 20
MAX_RSS_MB = 500
FUZZ = settings(
    max_examples=EXAMPLES or 30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)  # fmt: skip


@contextmanager
def _deadline(seconds: float, what: str) -> Iterator[None]:
    """Fail (rather than hang) when ``what`` runs past ``seconds``."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"{what} ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM back to the current RSS
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


_COUNT = {
    "stats": lambda r: json.loads(r.stdout)["records"],
    "inspect": lambda r: sum(1 for line in r.stdout.splitlines() if line.startswith("record ")),
    "merge": lambda r: int(re.search(r"wrote ([\d,]+) records", r.stderr)[1].replace(",", "")),
    "slice": lambda r: int(re.search(r"wrote ([\d,]+) records", r.stderr)[1].replace(",", "")),
    "replay": lambda r: int(re.search(r"dry run: ([\d,]+) requests", r.stdout)[1].replace(",", "")),
    "report": lambda r: int(
        re.search(r"(?:recorded|replayed) ([\d,]+) requests", r.stdout)[1].replace(",", "")
    ),
}


def _commands(path: Path, out: Path, skip: list[str]) -> dict[str, list[str]]:
    return {
        "stats": ["traces", "stats", "--json", *skip, str(path)],
        "inspect": ["traces", "inspect", "-n", "100000", *skip, str(path)],
        "merge": ["traces", "merge", *skip, "-o", str(out / "merged.msgpack"), str(path)],
        "slice": ["traces", "slice", *skip, "-o", str(out / "sliced.msgpack"), str(path)],
        "replay": ["replay", "--dry-run", *skip, "--out", str(out / "dry.msgpack"), str(path)],
        "report": ["report", "--replay-only", *skip, str(path)],
    }


def _verdict(name: str, result: Result) -> int | str:
    """The record count a command read, or "damaged"; fails on any other outcome."""
    what = f"{name}: {result.output[-2000:]}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        what,
        result.exc_info,
    )
    assert "Traceback" not in result.output, what
    assert result.exit_code in (0, 3), what
    if result.exit_code == 3:
        lines = result.stderr.strip().splitlines()
        errors = [line for line in lines if line.startswith("Error: ")]
        assert len(errors) == 1 and lines[-1] == errors[0], what
        if name == "replay" and "no records to replay" in errors[0]:
            return 0
        return "damaged"
    return int(_COUNT[name](result))


def _run_all(archive: Archive, tmp: Path, skip: bool) -> dict[str, int | str]:
    for f in tmp.iterdir():
        f.unlink()
    path = tmp / ("in.msgpack.zst" if archive.compressed else "in.msgpack")
    path.write_bytes(archive.data)
    verdicts = {}
    for name, args in _commands(path, tmp, ["--skip-corrupt"] if skip else []).items():
        with _deadline(DEADLINE_S, name):
            result = CliRunner().invoke(cli, args)
        verdicts[name] = _verdict(name, result)
    return verdicts


@FUZZ
@given(archive=archives())
def test_every_command_reaches_one_verdict(tmp_path: Path, archive: Archive) -> None:
    tmp = tmp_path / "run"
    tmp.mkdir(exist_ok=True)
    measured = _reset_peak_rss()
    for skip in (False, True):
        verdicts = _run_all(archive, tmp, skip)
        assert len(set(verdicts.values())) == 1, (skip, archive.damage, verdicts)
        if not archive.damage:  # intact bytes: the verdict is known in advance
            clean = archive.header_ok and archive.valid == archive.records
            want: int | str = archive.valid if skip or clean else "damaged"
            assert verdicts["stats"] == want, (skip, verdicts, archive)
    if measured:
        assert _peak_rss_mb() < MAX_RSS_MB


@settings(FUZZ, max_examples=(EXAMPLES or 100) // 20)
@given(archive=archives())
def test_commands_in_their_own_process(tmp_path: Path, archive: Archive) -> None:
    tmp = tmp_path / "child"
    tmp.mkdir(exist_ok=True)
    path = tmp / ("in.msgpack.zst" if archive.compressed else "in.msgpack")
    path.write_bytes(archive.data)
    codes = set()
    for args in (
        ["traces", "stats", str(path)],
        ["replay", "--dry-run", "--out", str(tmp / "dry.msgpack"), str(path)],
    ):
        (tmp / "dry.msgpack").unlink(missing_ok=True)
        code, err, rss = run_measured(args, tmp, timeout_s=DEADLINE_S)
        assert code in (0, 3) and "Traceback" not in err, (args, err)
        assert rss < MAX_RSS_MB, (args, rss)
        if "no records to replay" not in err:
            codes.add(code)
    assert len(codes) <= 1, (codes, archive.damage)
