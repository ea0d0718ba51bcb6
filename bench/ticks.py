"""Quantised clocks and long prompts: dispatch lag with the look-ahead on and off.

1. Building one request with a synthetic 100k-token prompt: the builder, against a
   comparison that draws each block with its own ``random.Random`` and ``choices``,
   joins the words and escapes the text with ``json.dumps``.
2. A trace logged in 3 s ticks (Poisson arrivals at 4/s over --seconds, floored to
   the tick; a third of the prompts 100k tokens, the rest 200; no bodies) replayed
   at tests/instant_target.py (answers at once, in its own process) four ways:
   ticks spread or sent as bursts (--no-spread-ticks), each with the look-ahead on
   (the default) and off (every request built when it is taken). Each replay runs
   in its own process; the table has the median over --runs of the replay's own lag
   percentiles (the summary's ``lag_ms``).

Run: ``.venv/bin/python bench/ticks.py`` (4 x 3 replays of ~65 s: about 14 minutes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tailreplay.replayer.prompts import BLOCK_TOKENS, PromptMaker  # noqa: E402
from tailreplay.replayer.request import RequestBuilder  # noqa: E402
from tailreplay.replayer.schedule import Planned  # noqa: E402
from tailreplay.traces.archive.record import Record  # noqa: E402
from tests.helpers import write_plain  # noqa: E402

TICK = 3 * 10**9
LONG = 100_000
CASES = {
    "spread, look-ahead on": (True, 256),
    "spread, look-ahead off": (True, 0),
    "bursts, look-ahead on": (False, 256),
    "bursts, look-ahead off": (False, 0),
}


def comparison_body(
    maker: PromptMaker, tokens: int, hashes: list[int] | None, salt: bytes
) -> bytes:
    """The comparison's work for one synthetic chat body."""
    out: list[str] = []
    for i in range((tokens + BLOCK_TOKENS - 1) // BLOCK_TOKENS):
        size = min(BLOCK_TOKENS, tokens - i * BLOCK_TOKENS)
        if hashes and i < len(hashes):
            rng = random.Random(hashes[i] ^ maker.seed)
        else:
            digest = hashlib.blake2b(salt + i.to_bytes(4, "big"), digest_size=8).digest()
            rng = random.Random(int.from_bytes(digest, "big") ^ maker.seed)
        out.extend(rng.choices(maker.words, k=size))
    text = " " + " ".join(out)
    body = {"model": "m", "stream": False, "messages": [{"role": "user", "content": text}],
            "max_tokens": 4, "min_tokens": 4, "ignore_eos": True}  # fmt: skip
    return json.dumps(body).encode()


def build_table(runs: int) -> list[str]:
    rows = ["| prompt | comparison (ms) | builder (ms) | ratio |", "|---|---:|---:|---:|"]
    for name, hashes in (("100k tokens, no prefix hashes", None),
                         ("100k tokens, 196 shared prefix blocks", list(range(196))),):  # fmt: skip
        maker = PromptMaker(0)
        builder = RequestBuilder(model_map={}, force_lengths=True, prompts=maker)
        compared, now = [], []
        for i in range(runs):
            record = Record(start_ns=i, trace_id=i.to_bytes(16, "big"), method="POST",
                            path="/v1/chat/completions", model="m", input_tokens=LONG,
                            prefix_hashes=hashes)  # fmt: skip
            began = time.perf_counter()
            comparison_body(maker, LONG, hashes, record.trace_id or b"")
            compared.append(time.perf_counter() - began)
            began = time.perf_counter()
            builder.build(Planned(0.0, record, 0, False, 4))
            now.append(time.perf_counter() - began)
        a, b = statistics.median(compared) * 1e3, statistics.median(now) * 1e3
        rows.append(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.1f}x |")
    return rows


def tick_archive(path: Path, seconds: float) -> int:
    rng = random.Random(8)
    t, maps = 0.0, []
    first = 1_700_000_001 * 10**9
    while (t := t + rng.expovariate(4.0)) < seconds:
        maps.append({"start_ns": first + int(t * 1e9) // TICK * TICK,
                     "trace_id": rng.randbytes(16), "span_id": rng.randbytes(8),
                     "method": "POST", "path": "/v1/chat/completions", "model": "m",
                     "stream": False, "input_tokens": LONG if rng.random() < 1 / 3 else 200,
                     "output_tokens": 4, "duration_ns": rng.randint(10**8, 10**9)})  # fmt: skip
    write_plain(path, maps)
    return len(maps)


def one_replay(args: list[str]) -> None:
    """Child process: one replay through the library, its summary as JSON on stdout."""
    from tailreplay.eventloop import run as run_on_loop
    from tailreplay.replayer.config import ReplayConfig
    from tailreplay.replayer.run import run
    from tailreplay.replayer.schedule import ScheduleConfig

    archive, target, out, spread, items = args
    config = ReplayConfig(
        schedule=ScheduleConfig(paths=[archive], spread_ticks=spread == "1"),
        target=target, out=Path(out), lookahead_items=int(items),
    )  # fmt: skip
    outcome = run_on_loop(run(config, lambda line: None), config.event_loop)  # as `replay`
    print(json.dumps(outcome.summary.to_json()))


def replay_table(seconds: float, runs: int) -> list[str]:
    from tests.instant_target import instant_target

    results: dict[str, list[dict[str, Any]]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory() as tmp, instant_target() as url:
        archive = Path(tmp) / "ticks.msgpack"
        n = tick_archive(archive, seconds)
        for _ in range(runs):
            for name, (spread, items) in CASES.items():
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", str(archive), url,
                     str(Path(tmp) / "r.msgpack"), "1" if spread else "0", str(items)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                results[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows = [
        f"{n} requests over {seconds:g} s in 3 s ticks, a third with 100k-token prompts; "
        f"median of {runs} runs",
        "",
        "| case | lag p50 (ms) | lag p99 (ms) | lag max (ms) | completed |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, summaries in results.items():
        med = {
            k: statistics.median(s["lag_ms"][k] for s in summaries) for k in ("p50", "p99", "max")
        }
        done = statistics.median(s["completed"] for s in summaries)
        rows.append(
            f"| {name} | {med['p50']:.2f} | {med['p99']:.2f} | {med['max']:.2f} | {done:g} |"
        )
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        one_replay(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--build-runs", type=int, default=21)
    args = parser.parse_args()
    print("\n".join(build_table(args.build_runs)))
    print()
    print("\n".join(replay_table(args.seconds, args.runs)))


if __name__ == "__main__":
    main()
