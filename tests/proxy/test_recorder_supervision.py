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

from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import metric
from tests.proxy_helpers import (
    echo_upstream,
    exit_line_counts,
    quick_sim,
    recorder_pid,
    start_proxy_process,
)

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
    with quick_sim() as url:
        yield url


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


async def _health_until_recording(admin: str, deadline: float) -> tuple[list[str], float | None]:
    """/healthz bodies seen, and when the recorder was recording again after it said it
    had exited (ok, or degraded only by the records its death cost)."""
    seen: list[str] = []
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            async with s.get(admin + "/healthz") as r:
                assert r.status == 200  # a serving proxy stays in rotation
                text = await r.text()
            seen.append(text)
            recording = text == "ok" or text.startswith("degraded: records dropped")
            if recording and any("recorder exited" in t for t in seen):
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
        recorder = recorder_pid(proc.pid)
        os.kill(recorder, signal.SIGKILL)
        killed = time.monotonic()
        seen, recording_again = await _health_until_recording(admin, killed + RESUME_S + slack)
        degraded = [t for t in seen if t.startswith("degraded")]
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
    assert recording_again is not None and recording_again - killed < RESUME_S + slack
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


async def _drops_and_health(admin: str, until: float) -> tuple[float | None, float | None]:
    """When the dropped counter first rose, and when /healthz first said degraded."""
    first_drop = first_degraded = None
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < until and first_degraded is None:
            async with s.get(admin + "/healthz") as r:
                if (await r.text()).startswith("degraded"):
                    first_degraded = time.monotonic()
            if first_drop is None and await metric(admin, DROPPED) > 0:
                first_drop = time.monotonic()
            await asyncio.sleep(0.05)
    return first_drop, first_degraded


DROPPED = "tailreplay_proxy_records_dropped_total"


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "compressed"])
async def test_a_full_disk_serves_every_client_and_leaves_a_readable_capture(
    tmp_path: Path, compress: bool
) -> None:
    """Every client served; health degraded within 5 s of the first drop; at the exit
    every exchange is written or dropped, and what is written is what a reader gets
    from the disk (with --compress too, where a failed write leaves whole blocks)."""
    with _small_disk(tmp_path / "disk", "1m") as disk:
        out = disk / "out"
        # Bodies kept and files rotated often: the disk fills within a second, and
        # the writer keeps trying new files while it stays full. Random bodies of
        # 32 KB compress little, and a second's worth spans many compressed blocks.
        compressing = ["--compress"] if compress else []
        statuses: list[int] = []
        async with echo_upstream() as upstream:
            proc, url, admin = start_proxy_process(upstream, out, "--bodies", "full", *compressing)
            try:
                until = time.monotonic() + 4.0  # several of the writer's retry intervals
                # Watched past the traffic: a busy machine's recorder fills the disk late.
                watch = asyncio.ensure_future(_drops_and_health(admin, until + 40))
                await _random_bodies(url, until, statuses)
                first_drop, first_degraded = await watch
            finally:
                proc.send_signal(signal.SIGTERM)
                stdout, err = proc.communicate(timeout=120)
        files = sorted(out.iterdir())
        sizes = {f.name: f.stat().st_size for f in files}
        stats = subprocess.run(
            [sys.executable, "-m", "tailreplay", "traces", "stats", "--json", *map(str, files)],
            capture_output=True,
            text=True,
        )
    served, written, dropped = exit_line_counts(stdout)
    assert statuses and set(statuses) == {200}  # the full disk cost no client anything
    assert dropped > 0  # it did fill up
    assert first_drop is not None and first_degraded is not None
    assert first_degraded - first_drop < 5.0
    assert served == len(statuses) == written + dropped
    assert b"close failed" not in err  # a broken file is closed without writing to it
    assert all(sizes.values()), sizes  # no empty (unreadable) file left behind
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["records"] == written


async def _random_bodies(url: str, until: float, statuses: list[int]) -> None:
    """Four clients posting 32 KB of random text each, 150 times or until ``until``:
    19 MB, enough to fill the disk many times over, and a backlog the recorder works
    through in seconds at shutdown even on a busy machine."""
    async with aiohttp.ClientSession() as s:

        async def client() -> None:
            for _ in range(150):
                if time.monotonic() >= until:
                    break
                text = os.urandom(16_000).hex()
                body = {"model": "m", "messages": [{"role": "user", "content": text}]}
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    statuses.append(r.status)

        await asyncio.gather(*(client() for _ in range(4)))
