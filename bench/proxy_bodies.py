"""Recording 4 KB request bodies at the proxy's full rate: how many records are written.

wrk POSTs 4 KB chat-completion bodies (``bench/chat_bodies.py``: multi-turn chats,
or single prompts where nothing repeats; every request distinct) with 50
connections to ``tailreplay proxy`` in front of a fixed responder (nginx, or an
aiohttp one without it), once per body mode. After each run the proxy's
``/metrics`` give the records written and dropped (waiting for the recorder's
backlog to empty), and /proc the CPU the proxy and its recorder took. The
recorder runs at a lower priority than the proxy and drops what it cannot keep
up with (counted): traffic comes first. Run: ``.venv/bin/python bench/proxy_bodies.py``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chat_bodies

from proxy import cpu_seconds, free_port, nginx, process, tailreplay_proxy, wrk_output

CASES = (("chats", "none"), ("chats", "redacted"), ("prompts", "none"), ("prompts", "redacted"))
Result = tuple[float, int, int, int, float]
"""(requests/s, requests served, records written, dropped, CPU µs per request)."""


def counts(admin: int) -> tuple[int, int, int]:
    """(written, dropped, backlog) from the proxy's metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as reply:
        text = reply.read().decode()

    def value(name: str) -> int:
        found = re.search(rf"^{name}(?:_total)? ([\d.e+]+)$", text, re.M)
        return int(float(found.group(1))) if found else 0

    return (
        value("tailreplay_proxy_records_written"),
        value("tailreplay_proxy_records_dropped"),
        value("tailreplay_proxy_record_backlog"),
    )


def settled(admin: int, expected: int, timeout: float = 120) -> tuple[int, int]:
    """(written, dropped) once they account for ``expected`` exchanges in all (the
    recorder has caught up), or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        written, dropped, _ = counts(admin)
        if written + dropped >= expected or time.monotonic() > deadline:
            return written, dropped
        time.sleep(0.2)


def run(port: int, admin: int, pid: int, script: Path, seconds: int, before: int) -> Result:
    """One wrk run; ``before``: the exchanges the proxy had served until then."""
    written0, dropped0 = settled(admin, before)
    cpu0 = cpu_seconds(pid)
    out = wrk_output(f"http://127.0.0.1:{port}", seconds, script)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    served = _served(out)
    written, dropped = settled(admin, before + served)
    cpu = (cpu_seconds(pid) - cpu0) / served * 1e6
    return rps, served, written - written0, dropped - dropped0, cpu


def _served(wrk_report: str) -> int:
    return int(re.search(r"(\d+) requests in", wrk_report).group(1))  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench/proxy_bodies.py needs wrk: apt-get install -y wrk nginx-light")
    results: dict[tuple[str, str], list[Result]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        up = free_port()
        if shutil.which("nginx"):
            stack.enter_context(process(nginx(tmp, 1, free_port(), up, fixed=up), up))
        else:
            stack.enter_context(process([sys.executable, "bench/proxy.py", "--fixed", str(up)], up))
        kinds = ("chats", "prompts")
        scripts = {kind: chat_bodies.wrk_script(kind, tmp / f"{kind}.lua") for kind in kinds}
        proxies, served = {}, {}
        for kind, bodies in CASES:
            port, admin = free_port(), free_port()
            command = tailreplay_proxy(port, up, tmp / f"{kind}-{bodies}")
            command[command.index("off")] = f"127.0.0.1:{admin}"
            pid = stack.enter_context(process([*command, "--bodies", bodies], port))
            proxies[kind, bodies] = (port, admin, pid)
            warm = wrk_output(f"http://127.0.0.1:{port}", 1, scripts[kind])
            served[kind, bodies] = _served(warm)
        for _ in range(args.runs):  # interleaved, so a shared machine's drift hits all alike
            for case, (port, admin, pid) in proxies.items():
                result = run(port, admin, pid, scripts[case[0]], args.seconds, served[case])
                results[case].append(result)
                served[case] += result[1]
    report(args, results)


def report(args: argparse.Namespace, results: dict[tuple[str, str], list[Result]]) -> None:
    print(
        f"wrk -t2 -c50 -d{args.seconds}s, 4 KB bodies (bench/chat_bodies.py); median of "
        f"{args.runs} runs; 2 cores shared by all\n"
    )
    print("| bodies | `--bodies` | requests/s | written | dropped | CPU µs/request | vs none |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for kind, bodies in CASES:
        runs = results[kind, bodies]
        rps = statistics.median(r[0] for r in runs)
        served = sum(r[1] for r in runs)
        written, dropped = sum(r[2] for r in runs), sum(r[3] for r in runs)
        cpu = statistics.median(r[4] for r in runs)
        base = statistics.median(r[0] for r in results[kind, "none"])
        print(
            f"| {kind} | {bodies} | {rps:,.0f} | {written / served:.1%} | "
            f"{dropped / served:.1%} | {cpu:.0f} | {rps / base:.2f} |"
        )


if __name__ == "__main__":
    main()
