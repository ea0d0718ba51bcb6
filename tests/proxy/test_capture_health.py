"""A recorder that hangs (SIGSTOP) is noticed by its progress, not only its death: health
says so within seconds, a hang that lasts is ended by a restart, and at shutdown every
served exchange is written or counted as dropped — exactly, as the exit line says."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import aiohttp

from tailreplay.proxy.capture_health import DROP_WINDOW_S, HUNG_S, RESTART_HUNG_S
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import metric
from tests.proxy_helpers import (
    echo_upstream,
    exit_line_counts,
    recorder_pid,
    start_proxy_process,
)

DEGRADED_WITHIN_S = 5.0  # from the stop to /healthz saying degraded


async def _traffic(url: str, until: float, served: list[int], body_bytes: int) -> None:
    """Four clients posting bodies of ``body_bytes`` until ``until`` (bounded in time)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * body_bytes}]}
    async with aiohttp.ClientSession() as s:

        async def client() -> None:
            while time.monotonic() < until:
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    served.append(r.status)
                await asyncio.sleep(0.02)

        await asyncio.gather(*(client() for _ in range(4)))


async def _first_degraded(admin: str, until: float) -> float | None:
    """When /healthz first said degraded (polled until ``until``), or None."""
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < until:
            async with s.get(admin + "/healthz") as r:
                assert r.status == 200  # a serving proxy stays in rotation
                if (await r.text()).startswith("degraded"):
                    return time.monotonic()
            await asyncio.sleep(0.05)
    return None


async def _health_ok(admin: str, until: float) -> bool:
    """Whether /healthz says ok before ``until``."""
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < until:
            async with s.get(admin + "/healthz") as r:
                if await r.text() == "ok":
                    return True
            await asyncio.sleep(0.2)
    return False


def _exit_counts(proc: subprocess.Popen[bytes]) -> tuple[int, int, int, bytes]:
    """SIGTERM the proxy; its exit line's served, written and dropped, and its log."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return (*exit_line_counts(out), err)


def _on_disk(out: Path) -> int:
    return sum(1 for _ in ArchiveReader(sorted(out.glob("*.msgpack*"))))


async def test_a_stopped_recorder_degrades_health_and_shutdown_accounts_for_every_exchange(
    tmp_path: Path,
) -> None:
    """SIGSTOP under traffic with 1 MiB bodies (the pipe fills and drops), then the
    proxy's SIGTERM while the recorder is still stopped."""
    out = tmp_path / "out"
    async with echo_upstream() as upstream:
        proc, url, admin = start_proxy_process(upstream, out, "--bodies", "full")
        recorder = recorder_pid(proc.pid)
        served: list[int] = []
        try:
            await _traffic(url, time.monotonic() + 1.0, served, 1_000)  # well within pace
            async with aiohttp.ClientSession() as s, s.get(admin + "/healthz") as r:
                assert await r.text() == "ok"
            os.kill(recorder, signal.SIGSTOP)
            stopped = time.monotonic()
            traffic = _traffic(url, stopped + DEGRADED_WITHIN_S + 1, served, 1 << 20)
            watch = _first_degraded(admin, stopped + DEGRADED_WITHIN_S + 1)
            _, degraded_at = await asyncio.gather(traffic, watch)
            capture_up = await metric(admin, "tailreplay_proxy_capture_up")
            async with aiohttp.ClientSession() as s, s.get(admin + "/healthz/capture") as r:
                capture_status = r.status
            counted, written, dropped, err = _exit_counts(proc)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(recorder, signal.SIGKILL)
            proc.kill()
    assert degraded_at is not None and degraded_at - stopped < DEGRADED_WITHIN_S
    assert capture_up == 0 and capture_status == 503
    assert served.count(200) == len(served) == counted  # clients never noticed
    assert written + dropped == counted
    assert dropped > 0  # the stop cost records, and they are counted
    assert _on_disk(out) == written
    assert b"no progress" in err


async def test_a_recorder_hung_past_the_limit_is_restarted_and_capture_resumes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    async with echo_upstream() as upstream:
        proc, url, admin = start_proxy_process(upstream, out)
        recorder = recorder_pid(proc.pid)
        served: list[int] = []
        try:
            os.kill(recorder, signal.SIGSTOP)
            stopped = time.monotonic()
            # Traffic through the hang and past the restart (bounded in time).
            await _traffic(url, stopped + RESTART_HUNG_S + HUNG_S + 5, served, 100)
            restarts = await metric(admin, "tailreplay_proxy_recorder_restarts_total")
            # Degraded while the restart's loss is recent; then ok again.
            ok_again = await _health_ok(admin, time.monotonic() + DROP_WINDOW_S + 10)
            counted, written, dropped, err = _exit_counts(proc)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(recorder, signal.SIGKILL)
            proc.kill()
    assert restarts == 1
    assert ok_again
    assert served.count(200) == len(served) == counted
    assert written + dropped == counted
    assert dropped > 0 and written > 0  # lost in the hang, recorded after the restart
    assert _on_disk(out) == written
    assert b"the recorder process exited (code -9)" in err


async def test_a_recorder_busy_with_one_large_record_is_not_taken_for_hung(
    tmp_path: Path,
) -> None:
    """A 9 MB prompt redacted takes the recorder seconds to build: health stays ok
    meanwhile, and a SIGTERM just after waits for that record instead of killing it."""
    out = tmp_path / "out"
    words = " ".join(f"word{i} user{i}@example.com" for i in range(300_000))  # ~9 MB
    body = {"model": "m", "messages": [{"role": "user", "content": words}]}
    async with echo_upstream() as upstream:
        proc, url, admin = start_proxy_process(
            upstream, out, "--bodies", "redacted", "--max-body", "20MiB"
        )
        try:
            async with aiohttp.ClientSession() as s:
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200
                sent = time.monotonic()
                health = []
                while time.monotonic() - sent < HUNG_S + 3:
                    async with s.get(admin + "/healthz") as h:
                        health.append(await h.text())
                    await asyncio.sleep(0.2)
            counted, written, dropped, _ = _exit_counts(proc)
        finally:
            proc.kill()
    assert set(health) == {"ok"}, sorted(set(health))
    assert (counted, written, dropped) == (1, 1, 0)
    assert _on_disk(out) == 1


async def test_a_replacement_recorder_stopped_before_it_was_ready_does_not_hold_shutdown(
    tmp_path: Path,
) -> None:
    """kill -9 the recorder, SIGSTOP its replacement while it starts: a SIGTERM still
    ends the proxy in seconds, with every exchange accounted for, and no recorder left."""
    out = tmp_path / "out"
    async with echo_upstream() as upstream:
        proc, url, _ = start_proxy_process(upstream, out)
        first = recorder_pid(proc.pid)
        served: list[int] = []
        stopped = None
        try:
            await _traffic(url, time.monotonic() + 1.0, served, 100)
            os.kill(first, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while stopped is None and time.monotonic() < deadline:
                with contextlib.suppress(AssertionError):
                    pid = recorder_pid(proc.pid)
                    if pid != first:
                        os.kill(pid, signal.SIGSTOP)
                        stopped = pid
                await asyncio.sleep(0.005)
            assert stopped is not None, "no replacement recorder seen"
            await _traffic(url, time.monotonic() + 1.0, served, 100)
            began = time.monotonic()
            counted, written, dropped, _ = _exit_counts(proc)
            took = time.monotonic() - began
        finally:
            for pid in (first, stopped):
                with contextlib.suppress(ProcessLookupError, TypeError):
                    os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
            proc.kill()
    assert took < 20, took
    assert served.count(200) == len(served) == counted == written + dropped
    assert _on_disk(out) == written
    assert not Path(f"/proc/{stopped}").exists()  # killed and reaped, not orphaned


async def _gauge_until(admin: str, name: str, wanted: float, until: float) -> float:
    """``name`` on /metrics, polled until it reads ``wanted`` or ``until``; its last value."""
    value = await metric(admin, name)
    while value != wanted and time.monotonic() < until:
        await asyncio.sleep(0.1)
        value = await metric(admin, name)
    return value


async def test_the_backlog_gauge_counts_every_exchange_not_yet_written(tmp_path: Path) -> None:
    """Exchanges the stopped recorder has not read (in the pipe, or in the loop's next
    batch) are backlog too, not only the batch in its hands: a caller waiting for the
    gauge to read 0 knows every exchange served is on disk."""
    out, n = tmp_path / "out", 20
    async with echo_upstream() as upstream:
        proc, url, admin = start_proxy_process(upstream, out)
        recorder = recorder_pid(proc.pid)
        try:
            os.kill(recorder, signal.SIGSTOP)
            stopped = time.monotonic()
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            async with aiohttp.ClientSession() as s:
                for _ in range(n):
                    async with s.post(url + "/v1/chat/completions", json=body) as r:
                        assert r.status == 200
            gauge = "tailreplay_proxy_record_backlog"
            # Well inside the restart of a hung recorder (RESTART_HUNG_S).
            behind = await _gauge_until(admin, gauge, n, stopped + RESTART_HUNG_S / 3)
            os.kill(recorder, signal.SIGCONT)
            caught_up = await _gauge_until(admin, gauge, 0, time.monotonic() + 60)
            written = await metric(admin, "tailreplay_proxy_records_written_total")
            counted, _, dropped, _ = _exit_counts(proc)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(recorder, signal.SIGKILL)
            proc.kill()
    assert behind == n
    assert caught_up == 0 and written == n == counted and dropped == 0
    assert _on_disk(out) == n
