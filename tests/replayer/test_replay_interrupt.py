"""Ctrl-C at any moment of a replay: exit 130, and a summary that says what was not sent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO

PEAK = REPO / "traces/peak.msgpack"  # 2,382 requests over 300 s


@pytest.mark.parametrize("after_s", [0.5, 1.0, 5.0])
def test_ctrl_c_exits_130_and_the_json_says_what_was_never_sent(
    tmp_path: Path, after_s: float
) -> None:
    summary = tmp_path / "s.json"
    # Its own session, so that the signal goes to the whole group as a terminal's
    # Ctrl-C does: the replay and the simulator it started.
    # Timed from when the command line is imported (0.6 s on an idle machine, longer on
    # a busy one), not from the process's start: a Ctrl-C during Python's own start-up
    # is Python's to handle.
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tailreplay.cli import replay_main; "
         "print('imported', file=sys.stderr, flush=True); replay_main()",
         "--json", str(summary), "--out", str(tmp_path / "r.msgpack"), str(PEAK)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stderr is not None and proc.stderr.readline() == "imported\n"
    time.sleep(after_s)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Aborted" not in err
    data = json.loads(summary.read_text())
    assert data["interrupted"] is True
    assert data["sent"] < 2_382
    if "scheduled" in data:  # the replay had begun: the counts are exact
        assert data["scheduled"] == 2_382
        assert data["unsent"] == 2_382 - data["sent"]
        assert out.startswith(f"interrupted after {data['due']:,} of 2,382 due; ")
    else:  # Ctrl-C came before the replay could take it over
        assert data["sent"] == 0
        assert "interrupted before the first request was sent" in err


def test_duration_stops_sending_and_says_how_many_were_never_sent(tmp_path: Path) -> None:
    summary = tmp_path / "s.json"
    done = subprocess.run(
        [sys.executable, "-c", "from tailreplay.cli import replay_main; replay_main()",
         "--duration", "3s", "--json", str(summary), "--out", str(tmp_path / "r.msgpack"),
         str(PEAK)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(summary.read_text())
    assert data["duration_limit_s"] == 3.0 and "interrupted" not in data
    assert 0 < data["sent"] < 2_382 and data["unsent"] == 2_382 - data["sent"]
    assert done.stdout.startswith(
        f"--duration 3s: sending stopped there; {data['unsent']:,} of 2,382 never sent"
    )


def test_a_second_ctrl_c_stops_at_once_and_the_results_are_still_written(
    tmp_path: Path,
) -> None:
    """A target that never answers: the first Ctrl-C says at once what it waits for,
    the second stops the wait; the requests cut are cancelled, not target errors."""
    from aiohttp import web

    from tests.helpers import chat_archive
    from tests.proxy_helpers import serve_in_thread

    async def hang(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(60)
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", hang)
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 20, gap_ms=50.0, seed=2)
    summary, results = tmp_path / "s.json", tmp_path / "r.msgpack"
    with serve_in_thread(app) as url:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from tailreplay.cli import replay_main; replay_main()",
                "--target",
                url,
                "--no-preflight",
                "--json",
                str(summary),
                "--out",
                str(results),
                str(archive),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert proc.stderr is not None
        # Let all 20 go out (due within 1 s of the start); they hang at the target.
        deadline = time.monotonic() + 60
        while not results.with_name(f".{results.name}.part").exists() and not results.exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(3)
        os.killpg(proc.pid, signal.SIGINT)
        line = proc.stderr.readline()
        while not line.startswith("stopping"):
            line = proc.stderr.readline()
        assert line.startswith("stopping: waiting up to 5 s for ")
        assert line.rstrip().endswith(" in flight (Ctrl-C again to stop now)")
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    assert proc.returncode == 130, err
    assert took < 4.5  # the first Ctrl-C's grace is 5 s; the second cut it short
    assert "stopping now: the requests in flight are cancelled" in err
    data = json.loads(summary.read_text())
    assert data["errors"] == {"cancelled": data["sent"]} and data["sent"] >= 1
    assert "errors: none  cancelled by the client" in out
    assert results.exists()


def test_requests_the_replayer_cut_are_no_reason_to_fail_fast() -> None:
    """A Ctrl-C before 20 answers cancels what was in flight: that is the replayer's
    doing, not the target's, and --fail-fast does not take it for a failing target."""
    from tailreplay.replayer.preflight import FailFast
    from tailreplay.traces.archive.record import Record

    guard = FailFast(20)
    cut = Record(start_ns=1, error="cancelled")
    assert not any(guard.observe(cut) for _ in range(25)) and guard.reason is None
    refused = Record(start_ns=1, error="http_500")
    assert [guard.observe(refused) for _ in range(20)][-1]
    assert guard.reason is not None and "failed with http_500" in guard.reason


def test_an_interrupted_runs_report_says_partial_and_its_slo_is_not_judged(
    tmp_path: Path,
) -> None:
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tailreplay.cli import replay_main; "
         "print('imported', file=sys.stderr, flush=True); replay_main()",
         "--json", str(summary), "--out", str(out), str(PEAK)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stderr is not None and proc.stderr.readline() == "imported\n"
    deadline = time.monotonic() + 60
    # Interrupted once the replay is sending: some answered, most never sent.
    while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 20_000):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    sent = json.loads(summary.read_text())
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "report", str(out), "--slo", "latency:p99<=600s",
         "--json", str(report)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr  # not judged
    doc = json.loads(report.read_text())
    assert doc["partial"]["scheduled"] == 2_382 and doc["partial"]["due"] == sent["due"]
    assert doc["verdict"]["state"] == "not_judged"
    assert doc["verdict"]["reason"].startswith("the run was cut short: ")
    assert done.stdout.startswith("PARTIAL RUN (")
    assert doc["warnings"][0].startswith("partial run: ")
    # Asked for explicitly, the requests sent are judged.
    judged = subprocess.run(
        [sys.executable, "-m", "tailreplay", "report", str(out), "--slo", "latency:p99<=600s",
         "--judge-partial", "--json", str(report)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    verdict = json.loads(report.read_text())["verdict"]
    assert "cut short" not in verdict["reason"]
    assert (judged.returncode, verdict["state"]) in ((0, "pass"), (4, "not_judged")), judged.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_stop_during_the_preflight_ends_it_at_once(tmp_path: Path, sig: int) -> None:
    """A target that accepts and never answers: the preflight would wait its --timeout
    (20 s here, 600 s by default); a stop ends it at once, exit 130, the JSON written."""
    accepted = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()  # until the replay goes

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    summary = tmp_path / "s.json"
    async with server:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "tailreplay", "replay", str(PEAK), "--target", url),
            *("--timeout", "20s", "--json", str(summary), "--out", str(tmp_path / "r.msgpack")),
            stderr=subprocess.PIPE,
        )
        await asyncio.wait_for(accepted.wait(), 30)
        await asyncio.sleep(0.3)  # the probe's request is written
        proc.send_signal(sig)
        t0 = time.monotonic()
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 130, err.decode()
    assert time.monotonic() - t0 < 10  # not the 20 s --timeout
    assert b"Traceback" not in err
    assert json.loads(summary.read_text())["interrupted"] is True
