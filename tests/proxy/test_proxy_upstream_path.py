"""An ``--upstream`` that ends in /v1, which clients add themselves: the proxy warns at
start, and when most answers are 404s its /healthz and its exit line say so.

The upstream serves its routes at /v1/... (as vLLM and llama.cpp do); the client
sends /v1/chat/completions, so through ``--upstream URL/v1`` every request reaches
/v1/v1/chat/completions.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from tailreplay.proxy.upstream_path import MIN_ANSWERS, not_found_note, v1_warning
from tests.fixed_upstream import fixed_app
from tests.proxy_helpers import exit_line_counts, serve_app, start_proxy_process

REQUESTS = MIN_ANSWERS + 5
BODY = {"model": "fixed", "messages": [{"role": "user", "content": "hi"}]}
_NOTE = re.compile(r"([\d,]+) of ([\d,]+) answers were 404 \(.*check --upstream's path\)")


async def _send(url: str, n: int) -> list[int]:
    """``n`` requests one after another on one connection; their statuses."""
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as s:
        statuses = []
        for _ in range(n):
            async with s.post(url + "/v1/chat/completions", json=BODY) as r:
                await r.read()
                statuses.append(r.status)
        return statuses


async def _healthz(admin: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(admin + "/healthz") as r:
        return r.status, await r.text()


def _stop(proc: subprocess.Popen[bytes]) -> tuple[str, str]:
    """SIGTERM the proxy; its stdout and stderr."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode(), err.decode()


async def _run(upstream: str, out: Path, n: int, *extra: str) -> tuple[list[int], str, str, str]:
    """The proxy as a process in front of ``upstream``, ``n`` requests through it: their
    statuses, its /healthz (read after them), its stdout and its stderr."""
    proc, url, admin = start_proxy_process(upstream, out, *extra)
    try:
        statuses = await _send(url, n)
        status, health = await _healthz(admin)
        assert status == 200  # a serving proxy stays in rotation, whatever it relays
    finally:
        stdout, stderr = _stop(proc)
    return statuses, health, stdout, stderr


async def test_an_upstream_ending_in_v1_is_warned_of_and_its_404s_are_said(
    tmp_path: Path,
) -> None:
    async with serve_app(fixed_app()) as upstream:
        statuses, health, stdout, stderr = await _run(upstream + "/v1", tmp_path, REQUESTS)
    assert statuses == [404] * REQUESTS
    (warning,) = [line for line in stderr.splitlines() if "ends in /v1" in line]
    assert warning.startswith(f"warning: --upstream {upstream}/v1 ends in /v1: ")
    assert "/v1/v1/" in warning
    # Read just after the last answer, which the proxy may not have counted yet.
    assert health.startswith("ok; warning: ")
    found = _NOTE.search(health)
    assert found is not None, health
    assert found.group(1) == found.group(2) and int(found.group(2)) >= REQUESTS - 1
    last = stdout.strip().splitlines()[-1]
    assert last.endswith(
        f"; {REQUESTS} of {REQUESTS} answers were 404 "
        "(the paths clients send do not exist upstream: check --upstream's path)"
    )
    assert exit_line_counts(stdout.encode()) == (REQUESTS, REQUESTS, 0)


async def test_an_upstream_without_v1_answering_is_not_warned_of(tmp_path: Path) -> None:
    async with serve_app(fixed_app()) as upstream:
        statuses, health, stdout, stderr = await _run(upstream, tmp_path, REQUESTS)
    assert statuses == [200] * REQUESTS
    assert "/v1" not in stderr and "warning" not in stderr
    assert health == "ok"
    assert "were 404" not in stdout  # (a port number may hold "404")
    assert exit_line_counts(stdout.encode()) == (REQUESTS, REQUESTS, 0)


async def test_a_few_404s_are_no_sign_of_a_wrong_path(tmp_path: Path) -> None:
    """Fewer answers than MIN_ANSWERS, all 404s: nothing said but the start's warning."""
    async with serve_app(fixed_app()) as upstream:
        statuses, health, stdout, _ = await _run(upstream + "/v1", tmp_path, MIN_ANSWERS - 1)
    assert statuses == [404] * (MIN_ANSWERS - 1)
    assert health == "ok" and "answers were 404" not in stdout


async def test_the_exit_line_of_several_workers_sums_their_404s(tmp_path: Path) -> None:
    """Each worker counts its own answers; the parent's exit line says the sum."""
    async with serve_app(fixed_app()) as upstream:
        proc, url, _ = start_proxy_process(upstream + "/v1", tmp_path, "--workers", "2")
        try:
            statuses = await _send(url, REQUESTS)
        finally:
            stdout, stderr = _stop(proc)
    assert statuses == [404] * REQUESTS
    assert sum("ends in /v1" in line for line in stderr.splitlines()) == 1  # not per worker
    assert f"; {REQUESTS} of {REQUESTS} answers were 404 (" in stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        ("http://h:8000", False),
        ("http://h:8000/", False),
        ("http://h:8000/v1", True),
        ("http://h:8000/v1/", True),
        ("http://h:8000/V1", True),
        ("http://h:8000/openai/v1", True),
        ("http://h:8000/v1/chat", False),
        ("http://h:8000/v10", False),
        ("http://h:8000/api", False),
    ],
)
def test_which_upstream_paths_are_warned_of(url: str, warned: bool) -> None:
    assert (v1_warning("--upstream", URL(url)) is not None) == warned


@pytest.mark.parametrize(
    ("answers", "not_found", "said"),
    [
        (0, 0, False),
        (MIN_ANSWERS - 1, MIN_ANSWERS - 1, False),
        (MIN_ANSWERS, MIN_ANSWERS // 2, False),  # half is not over half
        (MIN_ANSWERS, MIN_ANSWERS // 2 + 1, True),
        (1000, 501, True),
        (1000, 500, False),
    ],
)
def test_over_half_of_enough_answers_being_404s_is_said(
    answers: int, not_found: int, said: bool
) -> None:
    assert (not_found_note(answers, not_found) is not None) == said
