"""Timing fidelity and queueing of the simulator, in its own process (as replay runs it)."""

from __future__ import annotations

import asyncio
import statistics
import time

import aiohttp
import numpy as np

from tailreplay.sim.launcher import sim_process
from tailreplay.sim.profiles import PROFILES
from tests.sim_load import open_loop

PROMPT = "The quick brown fox jumps over the lazy dog. " * 50  # 501 tokens with the template


def _sum_count(metrics: str, name: str) -> tuple[float, float]:
    """(sum, count) of a histogram in Prometheus text (this test's one model)."""
    values = {}
    for line in metrics.splitlines():
        for part in ("_sum", "_count"):
            if line.startswith(f"{name}{part}{{"):
                values[part] = float(line.rsplit(" ", 1)[1])
    return values["_sum"], values["_count"]


def _mean_between(before: str, after: str, name: str) -> float:
    (s0, n0), (s1, n1) = _sum_count(before, name), _sum_count(after, name)
    return (s1 - s0) / (n1 - n0)


async def test_low_load_ttft_and_tpot_match_the_profile() -> None:
    # Steps long enough that a VM's wake-up jitter (5-20 ms seen on this project's
    # machines) is a few percent of them: the claim is the engine's arithmetic.
    p = PROFILES["default"].with_overrides(
        prefill_base_ms=200.0, prefill_per_token_ms=0.1, decode_base_ms=100.0,
        decode_per_seq_ms=0.0,
    )  # fmt: skip
    # The same prompt every time: without the prefix cache, each is prefilled in full.
    overrides = ["--prefill-base-ms", "200", "--prefill-per-token-ms", "0.1",
                 "--decode-base-ms", "100", "--decode-per-seq-ms", "0",
                 "--no-prefix-cache"]  # fmt: skip
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 8,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    # What this machine adds to a sleep of one step right now: a process that wakes after
    # 250 ms asleep wakes late on a busy machine, the simulator's like this test's.
    loop = asyncio.get_running_loop()
    overshoot = []
    for _ in range(4):
        t = loop.time()
        await asyncio.sleep(0.25)
        overshoot.append(loop.time() - t - 0.25)
    jitter = statistics.median(overshoot)
    ttfts, tpots = [], []
    with sim_process(["--profile", "default", *overrides]) as url:
        async with aiohttp.ClientSession() as s:
            # The first request of a process pays for imports and code paths.
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                await r.read()
            async with s.get(url + "/metrics") as r:
                warm = await r.text()
            for _ in range(6):  # one at a time: batch size 1, no queueing
                t0 = time.monotonic()
                stamps = []
                prompt_tokens = None
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    async for line in r.content:
                        if line.startswith(b'data: {"id"') and b'"content"' in line:
                            stamps.append(time.monotonic())
                        if b'"prompt_tokens"' in line:
                            prompt_tokens = int(line.split(b'"prompt_tokens":')[1].split(b",")[0])
                assert len(stamps) == 8 and prompt_tokens is not None
                ttfts.append(stamps[0] - t0)
                tpots.append((stamps[-1] - stamps[0]) / 7)
            async with s.get(url + "/metrics") as r:
                metrics = await r.text()
    want_ttft = (p.prefill_base_ms + p.prefill_per_token_ms * prompt_tokens) / 1000
    want_tpot = p.decode_ms(1) / 1000
    # The engine keeps to its model (its own view: arrival to first token emitted)...
    server_ttft = _mean_between(warm, metrics, "vllm:time_to_first_token_seconds")
    server_tpot = _mean_between(warm, metrics, "vllm:time_per_output_token_seconds")
    assert abs(server_ttft - want_ttft) < 0.10 * want_ttft + jitter, (
        server_ttft,
        want_ttft,
        jitter,
    )
    assert abs(server_tpot - want_tpot) < 0.10 * want_tpot + jitter, (
        server_tpot,
        want_tpot,
        jitter,
    )
    # ...and the client sees it as the engine produced it, later by HTTP, the request's
    # parsing and tokenising, and the wake-up of two idle processes (15-35 ms here).
    ttft, tpot = statistics.median(ttfts), statistics.median(tpots)
    assert 0 < ttft - server_ttft < 0.15 * want_ttft + jitter, (ttfts, server_ttft, jitter)
    assert abs(tpot - server_tpot) < 0.10 * want_tpot + jitter, (tpots, server_tpot, jitter)


async def test_p99_rises_with_offered_load_and_429s_appear_past_capacity() -> None:
    # A small engine so saturation comes at a few tens of requests per second:
    # 4 slots x 10 output tokens x ~14 ms a step ≈ 28 req/s of capacity.
    args = [
        "--max-num-seqs", "4", "--queue-limit", "40", "--decode-base-ms", "10",
        "--decode-per-seq-ms", "1", "--prefill-base-ms", "2", "--prefill-per-token-ms", "0",
    ]  # fmt: skip
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 10,
        "ignore_eos": True,
    }
    p99s, rejected = [], []
    with sim_process(args) as url:
        # Warm up first: the first requests of a process pay for imports and code paths.
        await open_loop(url, rate=20, duration_s=0.5, body=body, seed=0)
        for rate in (3, 18, 28, 60):
            results = await open_loop(url, rate=rate, duration_s=3.0, body=body, seed=rate)
            ok = [r.latency_s for r in results if r.status == 200]
            assert {r.status for r in results} <= {200, 429}
            p99s.append(float(np.percentile(ok, 99)))
            rejected.append(sum(r.status == 429 for r in results))
    assert p99s == sorted(p99s) and len(set(p99s)) == 4, p99s
    assert rejected[0] == rejected[1] == 0, rejected
    assert rejected[-1] > 0, rejected
