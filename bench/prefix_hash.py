"""What the simulator's prefix cache adds to a request: hashing the prompt's blocks.

The simulator tokenises every prompt (cl100k_base) to count it; with the prefix
cache on it also hashes the tokens in 16-token blocks, each hash chained to the
one before (``tailreplay.sim.prefix_cache.block_hashes``). The comparison is the
tokenising it already did: "hash / encode" is the share the cache adds.
Prompts are the replayer's synthetic ones (one word a token).

Run: ``.venv/bin/python bench/prefix_hash.py`` (a few seconds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tailreplay.replayer.prompts import PromptMaker
from tailreplay.sim.prefix_cache import block_hashes
from tailreplay.traces.text.tokens import get


def median_ms(f: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args()
    enc, maker = get(), PromptMaker()
    print(f"median of {args.runs} runs; block size {args.block_size}; "
          "ratio = hashing time / tokenising time\n")  # fmt: skip
    print("| prompt tokens | encode (ms) | hash blocks (ms) | hash / encode |")
    print("|---:|---:|---:|---:|")
    for n in (1_000, 10_000, 100_000):
        text = maker.text(n, None, n.to_bytes(4, "big"))
        tokens = enc.encode_ordinary(text)
        encode = median_ms(lambda t=text: enc.encode_ordinary(t), args.runs)
        hashing = median_ms(lambda t=tokens: block_hashes(t, args.block_size), args.runs)
        print(f"| {len(tokens):,} | {encode:.2f} | {hashing:.2f} | {hashing / encode:.2f} |")


if __name__ == "__main__":
    main()
