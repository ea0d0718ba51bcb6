"""Recording 4 KB request bodies at the proxy's full rate: how many records are written.

wrk POSTs 4 KB chat-completion bodies (``bench/chat_bodies.py``: multi-turn chats,
or single prompts where nothing repeats; every request distinct) with 50
connections to ``tailreplay proxy`` in front of a fixed responder (nginx, or an
aiohttp one without it), once per body mode, in two layouts (``LAYOUTS``): every
process on both cores, and the recorder on a core of its own. After each run the
proxy's ``/metrics`` give the records written (and of them shed) and dropped,
once the recorder has caught up, and /proc the CPU the proxy and its recorder
took. The recorder runs at a lower priority than the proxy: traffic comes first;
behind, it sheds the prompt's work, and past the pipe's limit drops (counted).
Run: ``.venv/bin/python bench/proxy_bodies.py``.
"""

from __future__ import annotations

import argparse
import os
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
LAYOUTS = ("shared", "own core")
"""shared: every process on both cores, as the scheduler likes; own core: wrk,
nginx and the proxy on core 0, the recorder alone on core 1 (as on a machine where
the load and the upstream are elsewhere and the recorder has a core to itself)."""
Result = tuple[float, int, int, int, int, float]
"""(requests/s, requests served, records written, shed, dropped, CPU µs per request)."""


def counts(admin: int) -> tuple[int, int, int]:
    """(written, shed, dropped) from the proxy's metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as reply:
        text = reply.read().decode()

    def value(name: str) -> int:
        found = re.search(rf"^tailreplay_proxy_records_{name}(?:_total)? ([\d.e+]+)$", text, re.M)
        return int(float(found.group(1))) if found else 0

    return value("written"), value("shed"), value("dropped")


def settled(admin: int, expected: int, timeout: float = 120) -> tuple[int, int, int]:
    """(written, shed, dropped) once written and dropped account for ``expected``
    exchanges in all (the recorder has caught up), or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        written, shed, dropped = counts(admin)
        if written + dropped >= expected or time.monotonic() > deadline:
            return written, shed, dropped
        time.sleep(0.2)


def run(
    target: tuple[int, int, int], script: Path, args: argparse.Namespace, before: int
) -> Result:
    """One wrk run against ``target`` (port, admin port, pid); ``before``: the
    exchanges the proxy had served until then."""
    port, admin, pid = target
    start = settled(admin, before)
    cpu0 = cpu_seconds(pid)
    out = wrk_output(f"http://127.0.0.1:{port}", args.seconds, script, args.wrk_cpus)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    served = _served(out)
    end = settled(admin, before + served)
    cpu = (cpu_seconds(pid) - cpu0) / served * 1e6
    written, shed, dropped = (b - a for a, b in zip(start, end, strict=True))
    return rps, served, written, shed, dropped, cpu


def _served(wrk_report: str) -> int:
    return int(re.search(r"(\d+) requests in", wrk_report).group(1))  # type: ignore[union-attr]


def pin_recorder(proxy_pid: int, cpu: int) -> None:
    """Move the proxy's recorder process (its child) onto ``cpu`` alone."""
    for child in Path(f"/proc/{proxy_pid}/task/{proxy_pid}/children").read_text().split():
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
            os.sched_setaffinity(int(child), {cpu})
            return
    raise RuntimeError(f"no recorder under the proxy {proxy_pid}")


def start_upstream(tmp: Path, stack: ExitStack, pin: list[str]) -> int:
    """The fixed responder (nginx, or bench/proxy.py's without it); its port."""
    up = free_port()
    if shutil.which("nginx"):
        upstream = nginx(tmp, 1, free_port(), up, fixed=up)
    else:
        upstream = [sys.executable, "bench/proxy.py", "--fixed", str(up)]
    stack.enter_context(process([*pin, *upstream], up))
    return up


def start_proxy(
    tmp: Path, stack: ExitStack, up: int, name: str, bodies: str, pin: list[str]
) -> tuple[int, int, int]:
    """``tailreplay proxy --bodies bodies`` in front of ``up``: (port, admin port, pid)."""
    port, admin = free_port(), free_port()
    command = tailreplay_proxy(port, up, tmp / name)
    command[command.index("off")] = f"127.0.0.1:{admin}"
    pid = stack.enter_context(process([*pin, *command, "--bodies", bodies], port))
    return port, admin, pid


def totals(runs: list[Result]) -> tuple[float, int, int, int, int, float]:
    """(median requests/s, served, written, shed, dropped, median CPU µs) of runs."""
    written, shed, dropped = (sum(r[i] for r in runs) for i in (2, 3, 4))
    rps, cpu = statistics.median(r[0] for r in runs), statistics.median(r[5] for r in runs)
    return rps, sum(r[1] for r in runs), written, shed, dropped, cpu


def layout_runs(args: argparse.Namespace, layout: str) -> dict[tuple[str, str], list[Result]]:
    pin = ["taskset", "-c", "0"] if layout == "own core" else []
    args.wrk_cpus = "0" if pin else None
    results: dict[tuple[str, str], list[Result]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        up = start_upstream(tmp, stack, pin)
        kinds = ("chats", "prompts")
        scripts = {kind: chat_bodies.wrk_script(kind, tmp / f"{kind}.lua") for kind in kinds}
        targets, served = {}, {}
        for kind, bodies in CASES:
            port, admin, pid = start_proxy(tmp, stack, up, f"{kind}-{bodies}", bodies, pin)
            if pin:
                pin_recorder(pid, 1)
            targets[kind, bodies] = (port, admin, pid)
            warm = wrk_output(f"http://127.0.0.1:{port}", 1, scripts[kind], args.wrk_cpus)
            served[kind, bodies] = _served(warm)
        for _ in range(args.runs):  # interleaved, so a shared machine's drift hits all alike
            for case, target in targets.items():
                result = run(target, scripts[case[0]], args, served[case])
                results[case].append(result)
                served[case] += result[1]
    return results


def paced_script(script: Path, rate: int, path: Path) -> Path:
    """``script`` sending ``rate`` requests a second in all: each of wrk's 50
    connections waits 50/rate s before its next request (wrk's ``delay()``; the
    answer's own time is added, so the rate reached is a little lower)."""
    path.write_text(script.read_text() + f"function delay() return {50_000 / rate:.3f} end\n")
    return path


def paced_runs(args: argparse.Namespace) -> dict[tuple[str, int], list[Result]]:
    """``--bodies redacted`` at each of ``args.paced`` rates, every process on both
    cores: the share of records written whole at rates below the proxy's full one."""
    args.wrk_cpus = None
    results: dict[tuple[str, int], list[Result]] = {}
    with tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        up = start_upstream(tmp, stack, [])
        for kind in ("chats", "prompts"):
            script = chat_bodies.wrk_script(kind, tmp / f"{kind}.lua")
            port, admin, pid = start_proxy(tmp, stack, up, f"{kind}-paced", "redacted", [])
            served = _served(wrk_output(f"http://127.0.0.1:{port}", 1, script))
            for rate in args.paced:
                paced = paced_script(script, rate, tmp / f"{kind}-{rate}.lua")
                for _ in range(args.runs):
                    result = run((port, admin, pid), paced, args, served)
                    results.setdefault((kind, rate), []).append(result)
                    served += result[1]
    return results


def paced_report(args: argparse.Namespace, results: dict[tuple[str, int], list[Result]]) -> None:
    print(
        f"`--bodies redacted` at a paced rate (wrk -t2 -c50 -d{args.seconds}s, each "
        f"connection's requests spaced); median of {args.runs} runs\n"
    )
    print("| bodies | rate asked | requests/s | written whole | shed | dropped | CPU µs/request |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (kind, rate), runs in results.items():
        rps, served, written, shed, dropped, cpu = totals(runs)
        print(
            f"| {kind} | {rate:,} | {rps:,.0f} | {(written - shed) / served:.1%} | "
            f"{shed / served:.1%} | {dropped / served:.1%} | {cpu:.0f} |"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--paced",
        type=lambda text: [int(r) for r in text.split(",")],
        default=[],
        help="also these rates (requests/s, comma-separated) with --bodies redacted",
    )
    parser.add_argument("--paced-only", action="store_true", help="skip the full-rate table")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench/proxy_bodies.py needs wrk: apt-get install -y wrk nginx-light")
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("bench/proxy_bodies.py needs two cores")
    if args.paced:
        paced_report(args, paced_runs(args))
    if not args.paced_only:
        report(args, {layout: layout_runs(args, layout) for layout in LAYOUTS})


def report(
    args: argparse.Namespace, results: dict[str, dict[tuple[str, str], list[Result]]]
) -> None:
    print(
        f"wrk -t2 -c50 -d{args.seconds}s, 4 KB bodies (bench/chat_bodies.py); median of "
        f"{args.runs} runs; written, shed and dropped: shares of all requests served\n"
    )
    head = "| cores | bodies | `--bodies` | requests/s | written | of them shed | dropped |"
    print(head + " CPU µs/request |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for layout in LAYOUTS:
        for kind, bodies in CASES:
            rps, served, written, shed, dropped, cpu = totals(results[layout][kind, bodies])
            print(
                f"| {layout} | {kind} | {bodies} | {rps:,.0f} | {written / served:.1%} | "
                f"{shed / served:.1%} | {dropped / served:.1%} | {cpu:.0f} |"
            )


if __name__ == "__main__":
    main()
