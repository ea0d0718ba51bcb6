"""Demo step 2: capture real traffic. Starts the simulator and the capture proxy, sends a
few hundred requests through the proxy with the openai SDK (streaming and not, arriving
as a Poisson process), then stops the proxy (which drains and closes its archive).

Usage: python scripts/demo_capture.py OUT_DIR [REQUESTS]
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

import openai
from yarl import URL

from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.server import start
from tailreplay.sim.launcher import sim_process

TOPICS = ["the tides", "compilers", "sourdough", "black holes", "tax law", "jazz", "glaciers"]


async def main(out: Path, n: int) -> None:
    rng = random.Random(1)
    with sim_process(["--profile", "fast", "--seed", "1"]) as sim:
        config = ProxyConfig(upstream=URL(sim), listen_port=0, admin_port=None, out_dir=out)
        async with start(config) as proxy:
            print(f"simulator {sim}, capture proxy {proxy.url}, archive in {out}/")
            client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-demo-not-a-secret")
            # Open-loop arrivals, as users make them: Poisson at 20 requests/s.
            loop = asyncio.get_running_loop()
            t_start, offsets, t = loop.time(), [], 0.0
            for _ in range(n):
                t += rng.expovariate(20.0)
                offsets.append(t)

            async def one(i: int) -> None:
                # A shared system prompt, so captured prefix hashes show the sharing.
                messages = [
                    {"role": "system", "content": "You are a concise assistant. " * 60},
                    {"role": "user", "content": f"Explain {rng.choice(TOPICS)} ({i})."},
                ]
                max_tokens = rng.randint(20, 200)
                await asyncio.sleep(t_start + offsets[i] - loop.time())
                if i % 3:
                    stream = await client.chat.completions.create(
                        model="demo-8b", messages=messages, stream=True, max_tokens=max_tokens
                    )
                    async for _ in stream:
                        pass
                else:
                    await client.chat.completions.create(
                        model="demo-8b", messages=messages, max_tokens=max_tokens
                    )

            await asyncio.gather(*(one(i) for i in range(n)))
            print(f"sent {n} requests through the proxy; stopping it")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 300))
