"""A recorder that dies is noticed, counted and restarted; a full disk loses no
request and leaves no unreadable file."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import metric
from tests.proxy_helpers import start_proxy_process

RESUME_S = 2.0  # capture resumes within this after the recorder dies
SLACK_S = 3.0  # a busy shared machine's start-up delays, on top of it (the test's margin)


def _start_up_s() -> float:
    """How long a process that imports the recorder takes to start on this machine now
    (~0.5 s idle; a busy machine's is several times that, and so is the restart's)."""
    began = time.monotonic()
    child = [sys.executable, "-c", "import tailreplay.proxy.recorder_process"]
    subprocess.run(child, check=True, timeout=120)
    return time.monotonic() - began


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    quick = ["--decode-base-ms", "2", "--prefill-base-ms", "1", "--prefill-per-token-ms", "0"]
    with sim_process([*quick, "--output-mean", "4"]) as url:
        yield url


def _recorder_pid(proxy_pid: int) -> int:
    """The proxy's child started by multiprocessing's spawn (not its resource tracker)."""
    children = Path(f"/proc/{proxy_pid}/task/{proxy_pid}/children").read_text().split()
    for pid in map(int, children):
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    raise AssertionError(f"no recorder among the proxy's children {children}")


async def _traffic(url: str, until: float, served: list[int]) -> None:
    async with aiohttp.ClientSession() as s:

        async def client() -> None:
            while time.monotonic() < until:  # bounded in time
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    served.append(r.status)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(client() for _ in range(4)))


async def _health_until_ok(admin: str, deadline: float) -> tuple[list[str], float | None]:
    """/healthz bodies seen, and when it said ok again after saying degraded."""
    seen: list[str] = []
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            async with s.get(admin + "/healthz") as r:
                assert r.status == 200  # a serving proxy stays in rotation
                text = await r.text()
            seen.append(text)
            if text == "ok" and any(t.startswith("degraded") for t in seen):
                return seen, time.monotonic()
            await asyncio.sleep(0.05)
    return seen, None


def _on_disk(out: Path) -> int:
    return sum(1 for _ in ArchiveReader(sorted(out.glob("*.msgpack"))))


async def test_a_killed_recorder_is_restarted_and_every_exchange_is_accounted_for(
    tmp_path: Path, sim_url: str
) -> None:
    out = tmp_path / "out"
    slack = max(SLACK_S, 3 * _start_up_s())
    proc, url, admin = start_proxy_process(sim_url, out)
    served: list[int] = []
    try:
        traffic = asyncio.ensure_future(_traffic(url, time.monotonic() + 8.0, served))
        await asyncio.sleep(2.0)
        recorder = _recorder_pid(proc.pid)
        os.kill(recorder, signal.SIGKILL)
        killed = time.monotonic()
        seen, ok_again = await _health_until_ok(admin, killed + RESUME_S + slack)
        degraded = [t for t in seen if t.startswith("degraded")]
        async with aiohttp.ClientSession() as s, s.get(admin + "/healthz/capture") as r:
            assert r.status == 200
        await traffic
        # The backlog drains; then every exchange is written or counted as dropped.
        deadline = time.monotonic() + 10
        while True:
            written = await metric(admin, "tailreplay_proxy_records_written_total")
            dropped = await metric(admin, "tailreplay_proxy_records_dropped_total")
            if written + dropped >= len(served) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        restarts = await metric(admin, "tailreplay_proxy_recorder_restarts_total")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert degraded, seen
    assert ok_again is not None and ok_again - killed < RESUME_S + slack
    assert restarts == 1
    assert served.count(200) == len(served) > 200  # clients never noticed
    assert int(written) + int(dropped) == len(served)
    assert _on_disk(out) == written  # what the metric says was written is on disk
    assert b"the recorder process exited (code -9)" in err
    assert b"restarted; capture resumed" in err


@contextlib.contextmanager
def _small_disk(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


async def test_a_full_disk_serves_every_client_and_leaves_a_readable_capture(
    tmp_path: Path, sim_url: str
) -> None:
    with _small_disk(tmp_path / "disk", "256k") as disk:
        out = disk / "out"
        # Bodies kept and files rotated often: the disk fills within a few requests,
        # and the writer keeps trying new files while it stays full.
        proc, url, admin = start_proxy_process(
            sim_url, out, "--bodies", "full", "--rotate-size", "64KiB"
        )
        statuses: list[int] = []
        try:
            async with aiohttp.ClientSession() as s:
                until = time.monotonic() + 4.0  # several of the writer's retry intervals
                while time.monotonic() < until:
                    prompt = " ".join(["word"] * 2_000)
                    body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
                    async with s.post(url + "/v1/chat/completions", json=body) as r:
                        await r.read()
                        statuses.append(r.status)
            dropped = await metric(admin, "tailreplay_proxy_records_dropped_total")
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
        files = sorted(out.iterdir())
        sizes = {f.name: f.stat().st_size for f in files}
        stats = subprocess.run(
            [sys.executable, "-m", "tailreplay", "traces", "stats", "--json", *map(str, files)],
            capture_output=True,
            text=True,
        )
    assert statuses and set(statuses) == {200}  # the full disk cost no client anything
    assert dropped > 0  # it did fill up
    assert all(sizes.values()), sizes  # no empty (unreadable) file left behind
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["records"] > 0
