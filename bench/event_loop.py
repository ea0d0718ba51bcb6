"""The replayer's client per request on uvloop and on asyncio's own loop: CPU time.

Each run is a fresh process that builds and sends ``--requests`` requests through
``HttpTransport`` (16-token synthetic prompts, 32 in flight, no dispatcher, so no
yielding until a due time) at nginx returning a fixed body, and prints the
process's CPU time per request; the loops alternate, ``--runs`` times each.

Needs nginx. Run: ``.venv/bin/python bench/event_loop.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proxy import free_port, nginx_conf, process

IN_FLIGHT = 32


async def _client(url: str, n: int) -> float:
    """CPU seconds for ``n`` requests, IN_FLIGHT at a time."""
    from tailreplay.replayer.prompts import PromptMaker
    from tailreplay.replayer.request import RequestBuilder
    from tailreplay.replayer.schedule import Planned
    from tailreplay.replayer.transport import HttpTransport
    from tailreplay.traces.record import Record

    builder = RequestBuilder(model_map={}, force_lengths=True, prompts=PromptMaker(0), edits=None)
    record = Record(start_ns=1, method="POST", path="/v1/chat/completions", input_tokens=16,
                    output_tokens=2)  # fmt: skip
    transport = HttpTransport(url, connections=64, timeout_s=10)
    await transport.warm(IN_FLIGHT)
    todo = iter(range(n))
    traceparent = f"00-{'1' * 32}-{'2' * 16}-01"

    async def one_at_a_time() -> None:
        for i in todo:
            spec = builder.build(Planned(0.0, record, 0, False, 2, key=i.to_bytes(8, "big")))
            outcome = await transport.send(spec, spec.headers({}, traceparent))
            assert outcome.status == 200, outcome

    began = time.process_time()
    await asyncio.gather(*(one_at_a_time() for _ in range(IN_FLIGHT)))
    took = time.process_time() - began
    await transport.close()
    return took


def child(url: str, loop: str, n: int) -> None:
    from tailreplay.eventloop import run

    print(run(_client(url, n), loop) / n * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, loop, n = args.child
        child(url, loop, int(n))
        return
    per: dict[str, list[float]] = {"uvloop": [], "asyncio": []}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp, port = Path(tmpdir), free_port()
        conf = nginx_conf(tmp, 1, free_port(), port, fixed=port)
        with process(["nginx", "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"], port):
            for _ in range(args.runs):
                for loop, runs in per.items():
                    done = subprocess.run(
                        [sys.executable, __file__, "--child", f"http://127.0.0.1:{port}", loop,
                         str(args.requests)],
                        capture_output=True, text=True, check=True,
                    )  # fmt: skip
                    runs.append(float(done.stdout.strip().splitlines()[-1]))
    print(f"{args.requests:,} requests a run, {IN_FLIGHT} in flight; CPU per request (µs)")
    for loop, runs in per.items():
        print(f"{loop}: median {statistics.median(runs):.1f}, min {min(runs):.1f}, "
              f"max {max(runs):.1f} over {len(runs)} runs")  # fmt: skip


if __name__ == "__main__":
    main()
