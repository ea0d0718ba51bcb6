"""A recorder that falls behind keeps every exchange: the records it reaches late are
written shed (timing, status and usage kept; no body, prompt tokens, hashes or
statistics), and it does the whole work again once it has caught up."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tailreplay.proxy.config import ProxyConfig
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import metric
from tests.proxy_helpers import exit_line_counts, quick_sim, recorder_pid, start_proxy_process

SECRET = "sk-proj-" + "Zq7Xw2Lk9" * 5
STOPPED_S = 2.0  # four times --shed-after's default: whatever waits through it is late


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with quick_sim() as url:
        yield url


async def _traffic(url: str, until: float, served: list[int]) -> None:
    prompt = f"My key is {SECRET}. " + "Tell me about the weather in spring. " * 20
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
    async with aiohttp.ClientSession() as s:

        async def client() -> None:
            while time.monotonic() < until:  # bounded in time
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    served.append(r.status)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(client() for _ in range(4)))


async def _stopped_under_traffic(url: str, recorder: int, served: list[int], run_s: float) -> None:
    """Traffic for ``run_s`` seconds, the recorder stopped for ``STOPPED_S`` of them
    (from a quarter of the way in)."""
    traffic = asyncio.ensure_future(_traffic(url, time.monotonic() + run_s, served))
    await asyncio.sleep(run_s / 4)
    os.kill(recorder, signal.SIGSTOP)
    await asyncio.sleep(STOPPED_S)
    os.kill(recorder, signal.SIGCONT)
    await traffic


async def test_a_recorder_stopped_under_load_catches_up_by_shedding_and_drops_nothing(
    tmp_path: Path, sim_url: str
) -> None:
    assert 4 * (ProxyConfig.shed_after_s or 0) <= STOPPED_S
    out = tmp_path / "out"
    proc, url, admin = start_proxy_process(sim_url, out, "--bodies", "redacted")
    recorder = recorder_pid(proc.pid)
    served: list[int] = []
    try:
        await _stopped_under_traffic(url, recorder, served, 6.0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the backlog drains (bounded in time)
            if await metric(admin, "tailreplay_proxy_records_written_total") >= len(served):
                break
            await asyncio.sleep(0.1)
        shed = await metric(admin, "tailreplay_proxy_records_shed_total")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(recorder, signal.SIGCONT)
        proc.terminate()
        stdout, err = proc.communicate(timeout=60)
    counted, written, dropped = exit_line_counts(stdout)
    assert served.count(200) == len(served) == counted > 100
    assert (written, dropped) == (counted, 0)  # every exchange written, none dropped
    records = list(ArchiveReader(sorted(out.glob("*.msgpack"))))
    assert len(records) == written
    late = [r for r in records if r.shed]
    whole = [r for r in records if not r.shed]
    assert len(late) == shed > 0 and len(whole) > 0  # and the recorder caught up
    for r in late:  # timing and usage kept; the prompt's work left out
        assert r.duration_ns and r.status == 200 and r.input_tokens and r.model == "m"
        assert r.req_body is None and r.prefix_hashes is None
        assert r.prompt_entropy_mbits is None and r.tokens_source == "usage"
    for r in whole:
        assert r.req_body is not None and r.prefix_hashes and r.prompt_entropy_mbits
    assert whole[-1].start_ns > max(r.start_ns for r in late)  # whole again at the end
    assert not any(SECRET.encode() in p.read_bytes() for p in out.iterdir())
    assert b"seconds behind" not in err and b"s behind: writing records without" in err
    assert f"({int(shed):,} shed:".encode() in stdout
    archives = [str(p) for p in sorted(out.glob("*.msgpack"))]
    command = [sys.executable, "-m", "tailreplay", "traces", "stats", *archives]
    stats = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    assert f"shed {int(shed):,}: recorded while the proxy's recorder was behind" in stats.stdout


async def test_with_shedding_off_a_late_recorder_does_the_whole_work(
    tmp_path: Path, sim_url: str
) -> None:
    out = tmp_path / "out"
    command = ("--bodies", "redacted", "--shed-after", "off")
    proc, url, _ = start_proxy_process(sim_url, out, *command)
    recorder = recorder_pid(proc.pid)
    served: list[int] = []
    try:
        await _stopped_under_traffic(url, recorder, served, 4.0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(recorder, signal.SIGCONT)
        proc.terminate()
        stdout, _ = proc.communicate(timeout=60)
    counted, written, dropped = exit_line_counts(stdout)
    assert (written, dropped) == (counted, 0) and counted == len(served) > 50
    records = list(ArchiveReader(sorted(out.glob("*.msgpack"))))
    assert len(records) == written and not any(r.shed for r in records)
    assert all(r.req_body is not None and r.prefix_hashes for r in records)
    assert b" shed: " not in stdout
