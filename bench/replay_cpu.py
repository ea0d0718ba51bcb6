"""CPU a replayed request costs the replay process, beside the least an asyncio client can.

A replay of evenly spaced chat requests (16-token synthetic prompts, 2-token
outputs) is sent faster than one process keeps up with (``--rate``, default
20,000/s), at nginx returning a fixed body: saturated, the process never waits
for a due time, so its CPU is all work (a replay that keeps up stops the bench).
The replay's CPU (user + system, the whole process) less that of a ``--dry-run``
of the same archive (start-up, reading and planning the schedule, writing
results), over the requests, is what sending, reading, measuring and accounting
cost a request. The comparison
run is the floor: a bare asyncio Protocol with httptools sending the same
request bytes, 32 in flight, reading each answer and nothing more. Median of
``--runs``, the three alternating.

``--baseline-python`` adds the replays of another commit (an interpreter from
``bench/baseline_env.sh COMMIT``), alternating with this checkout's.

Needs nginx. Run: ``.venv/bin/python bench/replay_cpu.py``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import even_archive

from proxy import free_port, nginx_conf, process
from tailreplay.eventloop import resolve

FLOOR_IN_FLIGHT = 32
SATURATED = 0.95
"""A replay that achieves this share of the offered rate is not saturated."""
FLOOR_PER_CONNECTION = 900
"""Requests a floor connection sends: under nginx's keepalive_requests (1,000)."""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def replay_cpu(
    url: str, archive: Path, tmp: Path, loop: str, requests: int, rate: int, py: str
) -> float:
    """Microseconds of CPU a request, beyond the dry run of the same archive, of a replay
    by interpreter ``py`` (run from ``tmp``: another commit's imports its own tailreplay)."""
    base = [py, "-m", "tailreplay", "replay", "--target", url, "--tail-stretch",
            "1", "--event-loop", loop, "--out", str(tmp / "r.msgpack"),
            "--json", str(tmp / "s.json"), "--overwrite"]  # fmt: skip
    before = _children_cpu()
    subprocess.run([*base, "--dry-run", str(archive)], check=True, capture_output=True, cwd=tmp)
    dry = _children_cpu() - before
    before = _children_cpu()
    subprocess.run([*base, str(archive)], check=True, capture_output=True, cwd=tmp)
    live = _children_cpu() - before
    summary = json.loads((tmp / "s.json").read_text())
    if summary["completed"] != requests:
        raise SystemExit(f"the replay completed {summary['completed']} of {requests}")
    if summary["throughput_rps"] >= SATURATED * rate:
        # A replay that keeps up spends its spare time waiting for due times (the
        # last stretch a busy wait): that CPU is not the requests'.
        raise SystemExit(f"the replay kept up with {rate:,}/s: not saturated; raise --rate")
    return (live - dry) / requests * 1e6


FLOOR = """
import asyncio, resource, sys, httptools
port, n, in_flight = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
body = sys.stdin.buffer.read()
request = (b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
           b"Content-Type: application/json\\r\\nUser-Agent: floor\\r\\n"
           b"traceparent: 00-0123456789abcdef0123456789abcdef-0123456789abcdef-01\\r\\n"
           b"Content-Length: %d\\r\\n\\r\\n%b" % (len(body), body))
class Client(asyncio.Protocol):
    def __init__(self):
        self.parser, self.done = httptools.HttpResponseParser(self), None
    def connection_made(self, transport):
        self.transport = transport
    def data_received(self, data):
        self.parser.feed_data(data)
    def on_message_complete(self):
        self.done.set_result(None)
async def one_connection(loop, count):
    _, client = await loop.create_connection(Client, "127.0.0.1", port)
    for _ in range(count):
        client.done = loop.create_future()
        client.transport.write(request)
        await client.done
async def main():
    loop = asyncio.get_running_loop()
    before = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(one_connection(loop, n // in_flight) for _ in range(in_flight)))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(cpu / (n // in_flight * in_flight) * 1e6)
asyncio.run(main())
"""


def floor_cpu(port: int, body: bytes) -> float:
    """Microseconds of CPU a request for the bare client (its sending alone)."""
    n = FLOOR_IN_FLIGHT * FLOOR_PER_CONNECTION
    out = subprocess.run(
        [sys.executable, "-c", FLOOR, str(port), str(n), str(FLOOR_IN_FLIGHT)],
        input=body, check=True, capture_output=True,
    )  # fmt: skip
    return float(out.stdout)


def _chat_body() -> bytes:
    """A body as the replayer builds it for the archive's records (16-token prompt)."""
    from tailreplay.replayer.prompts import PromptMaker
    from tailreplay.replayer.request import RequestBuilder
    from tailreplay.replayer.schedule import Planned
    from tailreplay.traces.archive.record import Record

    builder = RequestBuilder(model_map={}, force_lengths=True, prompts=PromptMaker(0))
    record = Record(start_ns=1, method="POST", path="/v1/chat/completions", input_tokens=16,
                    output_tokens=2)  # fmt: skip
    body = builder.build(Planned(0.0, record, 0, False, 2)).body
    assert body is not None
    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-python", help="an interpreter with another commit installed")
    args = parser.parse_args()
    requests = int(args.rate * args.seconds)
    loops = ["asyncio", "uvloop"] if resolve("auto") == "uvloop" else ["asyncio"]
    pythons = {"": sys.executable}
    if args.baseline_python:
        pythons[" baseline"] = str(Path(args.baseline_python).absolute())
    arms = {f"{loop}{tag}": (loop, py) for tag, py in pythons.items() for loop in loops}
    samples: dict[str, list[float]] = {**{arm: [] for arm in arms}, "floor": []}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        port = free_port()
        conf = nginx_conf(tmp, 1, free_port(), port, fixed=port)
        archive = tmp / "even.msgpack"
        even_archive(archive, args.rate, args.seconds)
        body = _chat_body()
        with process(["nginx", "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"], port):
            url = f"http://127.0.0.1:{port}"
            for _ in range(args.runs):
                for arm, (loop, py) in arms.items():
                    cpu = replay_cpu(url, archive, tmp, loop, requests, args.rate, py)
                    samples[arm].append(cpu)
                samples["floor"].append(floor_cpu(port, body))
    report(args, requests, samples)


def report(args: argparse.Namespace, requests: int, samples: dict[str, list[float]]) -> None:
    floor = statistics.median(samples["floor"])
    print(f"{requests:,} requests offered at {args.rate:,}/s (saturated); nginx; "
          f"median of {args.runs} runs; 2 cores shared")  # fmt: skip
    print()
    print("| client | CPU µs a request (median) | runs | x the floor |")
    print("|---|---:|---|---:|")
    names = {key: f"replay ({key.replace('asyncio', 'asyncio loop')})" for key in samples}
    names["floor"] = "floor: bare asyncio Protocol"
    for key, name in names.items():
        median = statistics.median(samples[key])
        runs = ", ".join(f"{x:.0f}" for x in samples[key])
        print(f"| {name} | {median:.0f} | {runs} | {median / floor:.2f} |")


if __name__ == "__main__":
    main()
