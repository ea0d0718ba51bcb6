"""A wrong target is found in seconds, not after the whole replay."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import REPO, chat_archive
from tests.proxy_helpers import serve_in_thread

# 200 requests over 100 s: a replay that ran to the end would take minutes.
N, GAP_MS = 200, 500.0


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with sim_process(["--decode-base-ms", "1", "--output-mean", "4"]) as url:
        yield url


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "a.msgpack"
    chat_archive(path, N, gap_ms=GAP_MS, seed=1)
    return path


def _replay(*args: str, timeout: float = 120) -> tuple[int, str, str, float]:
    """``replay`` as a user runs it: exit code, stdout, stderr, seconds taken."""
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", "from tailreplay.cli import replay_main; replay_main()", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr, time.monotonic() - t0


def _error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def test_a_port_with_nothing_listening_stops_before_the_schedule(
    tmp_path: Path, archive: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        code, stdout, err, took = _replay("--target", dead, str(archive))
    assert code == 5 and took < 5 + 3  # start-up of the interpreter on a busy machine
    (line,) = _error_lines(err)
    assert line.startswith("Error: preflight: cannot connect for POST ")
    assert f"{dead}/v1/chat/completions" in line
    assert stdout == ""  # no summary of a replay that never started


def test_credentials_in_the_target_url_are_never_printed(archive: Path, sim_url: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        refused = _replay("--target", dead.replace("//", "//user:s3cretpw@"), str(archive))
    answered = _replay(
        "--target", sim_url.replace("//", "//user:s3cretpw@"), "--limit", "2", str(archive)
    )
    for _, stdout, err, _ in (refused, answered):
        assert "s3cretpw" not in stdout + err, err
        assert "http://***@127.0.0.1:" in err, err
    assert (refused[0], answered[0]) == (5, 0)


def test_https_to_a_plain_http_port_is_named_as_such(archive: Path, sim_url: str) -> None:
    # "nothing listens there" sent users looking for a dead server.
    tls = sim_url.replace("http://", "https://")
    code, _, err, _ = _replay("--target", tls, str(archive))
    assert code == 5  # the target could not be measured
    (line,) = _error_lines(err)
    assert "the TLS handshake got something else" in line
    assert "does the target speak plain HTTP? try --target http://" in line


def test_a_redirecting_target_stops_before_the_schedule(archive: Path) -> None:
    async def moved(request: web.Request) -> web.Response:
        body = '{"error": "moved"}'
        headers = {"Location": "http://127.0.0.1:9/v1/chat/completions"}
        return web.Response(text=body, status=307, content_type="application/json", headers=headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", moved)
    with serve_in_thread(app) as url:
        code, _, err, _ = _replay("--target", url, str(archive))
    assert code == 5
    (line,) = _error_lines(err)
    assert "/v1/chat/completions is redirected (307): is --target the API's base URL?" in line


def test_a_server_answering_html_404_stops_before_the_schedule(archive: Path) -> None:
    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html>Not Found</html>", status=404, content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", html)
    with serve_in_thread(app) as url:
        code, _, err, took = _replay("--target", url + "/api", str(archive))
    assert code == 5 and took < 5 + 3
    (line,) = _error_lines(err)
    assert f"POST {url}/api/v1/chat/completions is 404 Not Found" in line
    assert "is --target the API's base URL?" in line


def test_a_target_given_with_v1_is_not_doubled(tmp_path: Path, sim_url: str) -> None:
    archive = tmp_path / "short.msgpack"
    chat_archive(archive, 10, gap_ms=20, seed=2)
    out = tmp_path / "r.msgpack"
    code, _, err, _ = _replay("--target", sim_url + "/v1/", "--out", str(out), str(archive))
    assert code == 0, err
    assert f"preflight: POST {sim_url}/v1/chat/completions answered 200" in err
    records = list(ArchiveReader([out]))
    assert len(records) == 10 and all(r.status == 200 for r in records)


def test_the_probe_is_sent_as_every_request_is(tmp_path: Path) -> None:
    """Servers built on FastAPI/pydantic (llama-cpp-python, many gateways) reject a body
    without a JSON content type: the probe carries the same headers as the replay."""
    archive = tmp_path / "short.msgpack"
    chat_archive(archive, 5, gap_ms=20, seed=3)
    seen: list[dict[str, str]] = []

    async def strict(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        if request.content_type != "application/json":
            return web.json_response({"error": {"message": "not a JSON body"}}, status=500)
        return web.json_response({"choices": [{"message": {"content": "x"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", strict)
    with serve_in_thread(app) as url:
        code, _, err, _ = _replay("--target", url, "--header", "X-Team: a", str(archive))
    assert code == 0, err
    assert len(seen) == 1 + 5
    assert seen[0]["X-Tailreplay-Preflight"] == "1"  # the probe, then the five
    assert all("X-Tailreplay-Preflight" not in h for h in seen[1:])
    for headers in seen:
        assert headers["Content-Type"] == "application/json" and headers["X-Team"] == "a"
        assert headers["traceparent"].startswith("00-")


def test_the_first_requests_all_failing_alike_stop_the_replay(
    tmp_path: Path, archive: Path
) -> None:
    seen: list[int] = []

    async def overloaded(request: web.Request) -> web.Response:
        seen.append(1)
        if len(seen) == 1:  # the probe gets an answer; then every request fails
            return web.json_response({"choices": [{"message": {"content": "x"}}]})
        return web.json_response({"error": {"message": "misconfigured"}}, status=500)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", overloaded)
    summary = tmp_path / "s.json"
    with serve_in_thread(app) as url:
        code, _, err, took = _replay(
            "--target", url, "--speed", "10x", "--json", str(summary), str(archive)
        )
    assert code == 5  # the target could not be measured
    assert took < 2 + 20 * GAP_MS / 1e3 / 10 + 5  # the 20th is due at 1 s
    (line,) = _error_lines(err)
    assert "the first 20 requests all failed with http_500 (misconfigured); stopped" in line
    data = json.loads(summary.read_text())
    assert data["aborted"] == line.removeprefix("Error: ")
    assert 20 <= data["sent"] < N


@pytest.mark.parametrize("status", [429, 503])
def test_an_overloaded_target_is_measured_not_stopped(
    tmp_path: Path, archive: Path, status: int
) -> None:
    # 429 and 503 are the target at its limit: what a replay is run to find.
    async def overloaded(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "overloaded"}}, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", overloaded)
    summary = tmp_path / "s.json"
    with serve_in_thread(app) as url:
        args = ["--target", url, "--speed", "10x", "--limit", "30", "--no-preflight"]
        _, _, err, _ = _replay(*args, "--json", str(summary), str(archive))
    data = json.loads(summary.read_text())
    assert data.get("aborted") is None and data["sent"] == 30, err
    assert data["errors"][f"http_{status}"] == 30


def test_a_relative_slo_the_recording_cannot_judge_is_refused_before_the_run() -> None:
    peak = REPO / "traces/peak.msgpack"  # token counts, no latencies
    code, stdout, err, _ = _replay("--slo", "ttft:p99<=1.2x", str(peak))
    assert code == 2 and stdout == ""
    assert err.strip() == (
        "Error: --slo 'ttft:p99<=1.2x': relative to the recording, but the archive records "
        "no ttft (ttfb_ns is absent from all 2,382 records); give an absolute limit instead "
        "(e.g. 800ms)"
    )
    code, _, err, _ = _replay("--slo", "latency_from_due:p99<=2x", str(peak))
    assert code == 2 and "exists only in a replay" in err


async def test_a_replay_through_the_proxy_captures_only_the_replayed_requests(
    tmp_path: Path, sim_url: str
) -> None:
    """The preflight and the warm-up are the replayer's own: a capture of a replay holds
    its requests, one record each, so replaying the capture sends the same ones."""
    import asyncio

    from tests.proxy_helpers import proxy_to, records

    path = tmp_path / "five.msgpack"
    sent = chat_archive(path, 5, gap_ms=20, seed=7)
    async with proxy_to(sim_url, tmp_path / "capture") as proxy:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tailreplay", "replay", "--target", proxy.url,
            "--out", str(tmp_path / "r.msgpack"), str(path),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, stderr = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, stderr.decode()
        assert "preflight: POST" in stderr.decode()  # the probe was sent, through the proxy
    captured = records(tmp_path / "capture")
    assert len(captured) == len(sent)
    assert {(r.method, r.path) for r in captured} == {("POST", "/v1/chat/completions")}
    assert {r.trace_id for r in captured} == {m["trace_id"] for m in sent}
