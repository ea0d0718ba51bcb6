"""How faithfully the simulator keeps its modelled step time as streams pile up.

For each profile and number of concurrent streams, a client process keeps that
many streaming requests running (each 100 tokens, ignore_eos; a new one starts
as soon as one ends) against ``tailreplay sim`` in its own process, and reads the
engine's step counters from /metrics over a measuring window after a warm-up.
"achieved / modelled" is the comparison: 1.00 means every step took exactly its
modelled time; above ~1.05 the simulator itself (one core, Python) has become the
bottleneck, and latencies measured against it start to include its own overhead.

Run: ``.venv/bin/python bench/sim.py`` (about 3 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp

from tailreplay.sim.launcher import sim_process

COUNTERS = (
    "tailreplay_sim_steps_total",
    "tailreplay_sim_late_steps_total",
    "tailreplay_sim_step_modelled_seconds_total",
    "tailreplay_sim_step_achieved_seconds_total",
    "vllm:generation_tokens_total",
    "process_cpu_seconds_total",
)


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as r:
        text = await r.text()
    out = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in COUNTERS:
            out[name] = float(line.rsplit(" ", 1)[1])
    return out


async def load(url: str, streams: int, warmup_s: float, window_s: float) -> dict[str, float]:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": 100,
        "ignore_eos": True,
        "stream": True,
    }
    stop_at = time.monotonic() + warmup_s + window_s + 1.0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while time.monotonic() < stop_at:
                async with session.post(url + "/v1/chat/completions", json=body) as r:
                    async for _ in r.content.iter_any():
                        pass

        tasks = [asyncio.create_task(worker()) for _ in range(streams)]
        await asyncio.sleep(warmup_s)
        before = await scrape(session, url)
        await asyncio.sleep(window_s)
        after = await scrape(session, url)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    delta = {k: after[k] - before[k] for k in COUNTERS}
    delta["window_s"] = window_s
    return delta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--window", type=float, default=4.0)
    args = parser.parse_args()
    cases = [("default", n) for n in (50, 100, 200)] + [
        ("fast", n) for n in (50, 100, 200, 400, 800)
    ]
    rows = []
    for profile, streams in cases:
        sim_args = ["--profile", profile, "--max-num-seqs", "1024", "--kv-tokens", "10000000"]
        runs = []
        for _ in range(args.runs):
            with sim_process(sim_args) as url:
                runs.append(asyncio.run(load(url, streams, 2.0, args.window)))
        modelled = [
            r["tailreplay_sim_step_modelled_seconds_total"] / r["tailreplay_sim_steps_total"]
            for r in runs
        ]
        achieved = [
            r["tailreplay_sim_step_achieved_seconds_total"] / r["tailreplay_sim_steps_total"]
            for r in runs
        ]
        late = [
            r["tailreplay_sim_late_steps_total"] / r["tailreplay_sim_steps_total"] for r in runs
        ]
        tokens = [r["vllm:generation_tokens_total"] / r["window_s"] for r in runs]
        cpu = [r["process_cpu_seconds_total"] / r["window_s"] for r in runs]
        m, a = statistics.median(modelled), statistics.median(achieved)
        late_share, tps, cpu_share = (statistics.median(x) for x in (late, tokens, cpu))
        rows.append((profile, streams, m * 1e3, a * 1e3, a / m, late_share, tps, cpu_share))

    print(f"median of {args.runs} runs; {args.window:.0f} s windows after a 2 s warm-up")
    print("the simulator runs in its own process, on one core; the client on the other")
    print()
    print(
        "| profile | streams | modelled step ms | achieved step ms | achieved / modelled "
        "| late steps | tokens/s | simulator CPU |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for profile, streams, m, a, ratio, late, tps, cpu in rows:
        print(
            f"| {profile} | {streams} | {m:.2f} | {a:.2f} | {ratio:.3f} | {late:.1%} "
            f"| {tps:,.0f} | {cpu:.0%} |"
        )


if __name__ == "__main__":
    main()
