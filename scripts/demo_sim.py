"""Demo: the built-in simulator answering the real openai SDK, and queueing under a burst."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import openai

from tailreplay.sim.launcher import sim_process


async def main() -> None:
    with sim_process(["--seed", "7"]) as url:
        print(f"simulator at {url}")
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        t0 = time.monotonic()
        stream = await client.chat.completions.create(
            model="demo",
            messages=[{"role": "user", "content": "Say something."}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                print(chunk.choices[0].delta.content, end="", flush=True)
            if chunk.usage:
                u = chunk.usage
                took = time.monotonic() - t0
                print(f"\n  usage {u.prompt_tokens} in / {u.completion_tokens} out, {took:.2f} s")

        async def one(i: int) -> float:
            start = time.monotonic()
            await client.chat.completions.create(
                model="demo",
                messages=[{"role": "user", "content": f"request {i}"}],
                max_tokens=64,
                extra_body={"ignore_eos": True},
            )
            return time.monotonic() - start

        for burst in (1, 40, 120):
            times = sorted(await asyncio.gather(*(one(i) for i in range(burst))))
            p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
            print(f"  burst of {burst:3d}: median {times[len(times) // 2]:.2f} s, p99 {p99:.2f} s")
        metrics = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
        for line in metrics.splitlines():
            if line.startswith(("vllm:generation_tokens_total", "vllm:num_preemptions_total")):
                print("  " + line)


if __name__ == "__main__":
    asyncio.run(main())
