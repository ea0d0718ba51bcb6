"""The recorder's work per record, in one process: ``build_record`` on 4 KB bodies.

What one recorder process can write at most, whatever the proxy's rate: exchanges
carrying ``bench/chat_bodies.py``'s bodies (multi-turn chats; single prompts where
nothing repeats) and a non-streamed reply with usage, built into records by
``tailreplay.proxy.record_builder.build_record`` with ``--bodies none`` and
``redacted``; with the memos of redacted strings and message tokens, and with
them emptied (capacity 0) for comparison, in the same run. The memos are warmed
first with 2,000 other requests of the same conversations (a recorder that has
been running). Median of ``--runs``; CPU time of this process.
Run: ``.venv/bin/python bench/recorder.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chat_bodies

from tailreplay.openai_api import ResponseTap
from tailreplay.proxy import record_builder
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.exchange import Exchange
from tailreplay.traces.text import redact_json
from tailreplay.traces.text.memo import SizedMemo
from tailreplay.traces.text.tokens import get

REPLY = (
    b'{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":914,"completion_tokens":3,'
    b'"total_tokens":917}}'
)


def exchange(body: bytes) -> Exchange:
    ex = Exchange(
        trace_id=os.urandom(16),
        span_id=os.urandom(8),
        parent_span_id=None,
        start_ns=time.time_ns(),
        t0_ns=time.monotonic_ns(),
        method="POST",
        path="/v1/chat/completions",
        route="/v1/chat/completions",
        headers=[("Host", "127.0.0.1"), ("Content-Type", "application/json")],
        probe=False,
    )
    ex.req_body, ex.bytes_in, ex.status = body, len(body), 200
    ex.tap = ResponseTap(stream=False)
    ex.tap.feed(REPLY)
    ex.ttfb_ns, ex.duration_ns, ex.bytes_out = 1_000_000, 2_000_000, len(REPLY)
    return ex


def per_record(kind: str, bodies: str, capacities: tuple[int, int], n: int) -> float:
    """CPU µs per record built, with memos of these capacities (strings, tokens)."""
    config = ProxyConfig(
        upstream=URL("http://127.0.0.1:1"), out_dir=Path(tempfile.mkdtemp()), bodies=bodies
    )
    redact_json.STRINGS = SizedMemo(capacities[0])
    record_builder.PROMPT_TOKENS = SizedMemo(capacities[1])
    for body in chat_bodies.bodies(kind, 2000, start=10**6):
        record_builder.build_record(exchange(body), config)
    exchanges = [exchange(body) for body in chat_bodies.bodies(kind, n)]
    start = time.process_time()
    for ex in exchanges:
        record_builder.build_record(ex, config)
    return (time.process_time() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    get()  # the tokenizer, built once
    capacities = (redact_json.STRINGS.capacity, record_builder.PROMPT_TOKENS.capacity)
    print(
        f"build_record on {args.records:,} exchanges a run, 4 KB bodies (bench/chat_bodies.py); "
        f"median of {args.runs} runs; CPU µs per record, one process\n"
    )
    print("| bodies | `--bodies` | memos | µs/record | records/s | vs without memos |")
    print("|---|---|---|---:|---:|---:|")
    for kind in ("chats", "prompts"):
        for bodies in ("none", "redacted"):
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.runs):  # interleaved, so drift hits both alike
                for memo in (False, True):
                    sizes = capacities if memo else (0, 0)
                    times[memo].append(per_record(kind, bodies, sizes, args.records))
            base = statistics.median(times[False])
            for memo in (False, True):
                us = statistics.median(times[memo])
                row = f"| {kind} | {bodies} | {'on' if memo else 'off'} | {us:.0f} | "
                print(row + f"{1e6 / us:,.0f} | {us / base:.2f} |")


if __name__ == "__main__":
    main()
