"""A small open-loop load generator for the simulator tests (bounded in count and time)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

import aiohttp


@dataclass
class Result:
    status: int
    latency_s: float


async def open_loop(
    url: str, rate: float, duration_s: float, body: dict, seed: int = 1, timeout_s: float = 60
) -> list[Result]:
    """Poisson arrivals at ``rate`` for ``duration_s``; each request due at t0 + offset."""
    rng = random.Random(seed)
    offsets, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s or len(offsets) >= 10_000:
            break
        offsets.append(t)
    results: list[Result] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)
    ) as session:
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        async def one(due: float) -> None:
            await asyncio.sleep(max(0.0, t0 + due - loop.time()))
            start = time.monotonic()
            async with session.post(url + "/v1/chat/completions", json=body) as resp:
                await resp.read()
                results.append(Result(resp.status, time.monotonic() - start))

        await asyncio.gather(*(one(o) for o in offsets))
    return results
