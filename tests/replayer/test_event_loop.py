"""``replay --event-loop``: asyncio's own loop by default, uvloop on request (``uvloop``,
or ``auto``: where it is installed), and on either the dispatch lag measured to the
microsecond, though uvloop's ``loop.time()`` counts whole milliseconds (the dispatcher
reads ``time.monotonic``)."""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import uvloop
from click.testing import CliRunner

from tailreplay import eventloop
from tailreplay.cli import cli
from tailreplay.errors import UsageError
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import UNBOUND, assert_client_verdict_consistent, chat_archive

NO_UVLOOP = (
    "import sys; sys.modules['uvloop'] = None; "  # import uvloop raises ImportError
    "from tailreplay.cli import replay_main; replay_main()"
)
COUNT_UVLOOPS = """\
import os
import uvloop

_new_event_loop = uvloop.new_event_loop


def _counted():
    with open(os.environ["TAILREPLAY_TEST_LOOPS"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    return _new_event_loop()


uvloop.new_event_loop = _counted
"""
"""A sitecustomize for the --workers processes: each uvloop loop made adds its pid."""


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with sim_process(["--profile", "fast", "--max-num-seqs", "512"]) as url:
        yield url


def _off_the_ms_grid(lags_ns: list[int]) -> float:
    """The share of lags more than 1 µs from a whole millisecond."""
    rest = np.asarray(lags_ns) % 1_000_000
    return float(np.mean(np.minimum(rest, 1_000_000 - rest) > 1_000))


def _replay_on(
    loop: str, tmp_path: Path, sim: str, monkeypatch: pytest.MonkeyPatch, *extra: str
) -> tuple[list[int | None], dict, str]:
    """300 requests at 200/s replayed on ``loop``: (each result's lag in ns, the JSON
    summary, stdout)."""
    made: list[asyncio.AbstractEventLoop] = []
    new_event_loop = uvloop.new_event_loop

    def counted() -> asyncio.AbstractEventLoop:
        made.append(new_event_loop())
        return made[-1]

    monkeypatch.setattr(uvloop, "new_event_loop", counted)
    # 200 requests/s whose due times sit on a whole-millisecond grid: lags read on a
    # millisecond clock (uvloop's loop.time()) would all be whole milliseconds.
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 300, gap_ms=5, seed=3)
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    result = CliRunner().invoke(
        cli,
        ["replay", str(archive), "--target", sim, "--event-loop", loop, "--out", str(out),
         "--json", str(summary), *extra],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert len(made) == (loop == "uvloop")
    s = json.loads(summary.read_text())
    assert s["sent"] == s["completed"] == 300 and s["dropped"] == 0
    return [r.lag_ns for r in ArchiveReader([out])], s, result.stdout


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_either_loop_sends_every_request_with_its_lag_to_the_microsecond(
    tmp_path: Path, sim: str, loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lags, s, stdout = _replay_on(loop, tmp_path, sim, monkeypatch, *UNBOUND)
    assert len(lags) == 300 and all(lag is not None for lag in lags)
    assert _off_the_ms_grid(lags) > 0.5  # ~1.0: microsecond resolution
    assert_client_verdict_consistent(s, stdout)


@pytest.mark.perf
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_either_loop_sends_within_1_ms_at_the_median(
    tmp_path: Path, sim: str, loop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lags, _, _ = _replay_on(loop, tmp_path, sim, monkeypatch)
    # ~0.05 ms on an idle machine.
    assert np.median(lags) < 1e6, np.median(lags)


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_run_takes_asyncio_by_default_and_uvloop_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert eventloop.run(_loop_module()) == "asyncio"
    assert eventloop.run(_loop_module(), "uvloop") == "uvloop"
    assert eventloop.run(_loop_module(), "auto") == "uvloop"
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not installed
    assert eventloop.resolve("auto") == "asyncio"
    assert eventloop.run(_loop_module(), "auto") == "asyncio"
    coro = _loop_module()
    with pytest.raises(UsageError, match="--event-loop uvloop: uvloop cannot be imported"):
        eventloop.run(coro, "uvloop")
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # no "never awaited"


def test_uvloop_asked_for_where_it_cannot_be_imported_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    archive, out = tmp_path / "a.msgpack", tmp_path / "r.msgpack"
    chat_archive(archive, 5, gap_ms=10, seed=1)
    args = ["--dry-run", "--out", str(out), str(archive)]
    refused = subprocess.run(
        [sys.executable, "-c", NO_UVLOOP, "--event-loop", "uvloop", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2
    (line,) = refused.stderr.splitlines()
    assert line.startswith("Error: --event-loop uvloop: uvloop cannot be imported here")
    assert not out.exists()
    # auto falls back to asyncio's loop, saying nothing.
    done = subprocess.run(
        [sys.executable, "-c", NO_UVLOOP, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "uvloop" not in done.stderr and out.exists()


@pytest.mark.parametrize(("loop", "uvloops"), [("asyncio", 0), ("auto", 2), (None, 0)])
def test_workers_run_on_the_loop_asked_for(
    tmp_path: Path, sim: str, loop: str | None, uvloops: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, made = tmp_path / "site", tmp_path / "loops.txt"
    site.mkdir()
    (site / "sitecustomize.py").write_text(COUNT_UVLOOPS)
    monkeypatch.setenv("PYTHONPATH", str(site))  # the spawned workers import it at start
    monkeypatch.setenv("TAILREPLAY_TEST_LOOPS", str(made))
    archive, out, summary = tmp_path / "a.msgpack", tmp_path / "r.msgpack", tmp_path / "s.json"
    chat_archive(archive, 200, gap_ms=5, seed=4)
    result = CliRunner().invoke(
        cli,
        ["replay", str(archive), "--target", sim, "--workers", "2",
         *(["--event-loop", loop] if loop else []), "--out", str(out), "--json", str(summary)],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    s = json.loads(summary.read_text())
    assert s["sent"] == s["completed"] == 200 and s["workers"] == 2
    pids = made.read_text().split() if made.exists() else []
    assert len(set(pids)) == len(pids) == uvloops  # one uvloop loop in each worker, or none
