"""Retries through the proxy: a 429's ``Retry-After`` is recorded, the client's second
try of the same request is linked to its first, and a replay sends it as late after
the first as it was recorded.

The simulator runs one sequence with a queue of one, a token every 20 ms: two
40-token requests fill it for 1.6 s, so a third sent meanwhile gets a 429 with
``Retry-After: 1``; the client waits that second and sends it again (same API key,
same body), and this time it is queued.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

from tailreplay.sim.profiles import PROFILES
from tailreplay.sim.server import SimConfig, serve
from tailreplay.traces.archive.reader import ArchiveReader
from tests.proxy_helpers import proxy_to, records

ONE = PROFILES["default"].with_overrides(
    decode_base_ms=20.0, decode_per_seq_ms=0.0, max_num_seqs=1, queue_limit=1
)


def _body(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "stream": True,
            "max_tokens": 40, "ignore_eos": True}  # fmt: skip


async def _post(s: aiohttp.ClientSession, url: str, text: str, key: str) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {key}"}
    async with s.post(url + "/v1/chat/completions", json=_body(text), headers=headers) as r:
        await r.read()
        return r.status, r.headers.get("Retry-After", "")


async def _client_that_retries(url: str) -> list[int]:
    async with aiohttp.ClientSession() as s:
        busy = []
        for i in range(2):  # one running, then one waiting (the engine admits on its step)
            busy.append(asyncio.create_task(_post(s, url, f"fill {i}", "k-fill")))
            await asyncio.sleep(0.1)
        statuses = []
        for _ in range(4):
            status, wait = await _post(s, url, "the same question", "k-user")
            statuses.append(status)
            if status != 429:
                break
            await asyncio.sleep(float(wait))
        await asyncio.gather(*busy)
        return statuses


async def test_a_retry_is_linked_to_its_429_and_replayed_as_late(tmp_path: Path) -> None:
    async with serve(SimConfig(profile=ONE, port=0)) as sim:
        async with proxy_to(sim, tmp_path / "capture") as proxy:
            assert await _client_that_retries(proxy.url) == [429, 200]
        chats = [r for r in records(tmp_path / "capture") if r.path == "/v1/chat/completions"]
        assert not any("k-user" in (r.session or "") for r in chats)  # keys are hashed
        first, again = sorted((r for r in chats if r.status == 429 or r.attempt),
                              key=lambda r: r.start_ns)  # fmt: skip
        assert first.status == 429 and first.retry_after_ms == 1000 and first.attempt is None
        assert again.status == 200 and again.attempt == 2 and again.retry_of == first.span_id
        # The two fills, identical neither to each other nor to the user's, are no retries.
        assert sum(r.attempt is None and r.status == 200 for r in chats) == 2
        gap_ns = again.start_ns - first.start_ns
        archive = sorted((tmp_path / "capture").glob("*.msgpack*"))[0]

        # Replayed as recorded (the default): the retry leaves as long after its first
        # attempt as it did.
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tailreplay", "replay", str(archive), "--target", sim,
            "--out", str(tmp_path / "r.msgpack"), "--no-preflight", "--allow-upstream",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, stderr = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, stderr.decode()
    replayed = {r.orig_span_id: r for r in ArchiveReader([tmp_path / "r.msgpack"])}
    sent_gap_ns = replayed[again.span_id].sent_ns - replayed[first.span_id].sent_ns
    assert abs(sent_gap_ns - gap_ns) <= 50 * 10**6, (sent_gap_ns, gap_ns)

    # --retries policy (or off) leaves the recorded retry out: the replay's own client
    # retries instead (or nothing does).
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", str(archive), "--dry-run",
         "--retries", "policy", "--out", str(tmp_path / "d.msgpack")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    planned = [r.orig_span_id for r in ArchiveReader([tmp_path / "d.msgpack"])]
    assert first.span_id in planned and again.span_id not in planned
    assert len(planned) == len(chats) - 1
