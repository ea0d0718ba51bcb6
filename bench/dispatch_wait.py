"""The dispatcher's last wait before each send: its lag, and the CPU it costs.

For each rate, an archive of evenly spaced requests (16-token prompts, 2-token
outputs) is replayed for ``--seconds`` at nginx returning a fixed body by one
process (``--workers``), alternating the arms run by run: this checkout's
dispatcher; the same with the timerfd turned off (``--yield``: it yields to the loop
for the last 1.5 ms before each send, as where there is no timerfd); and another
commit's (``--baseline-python``, an interpreter with that commit installed:
``bench/baseline_env.sh COMMIT``). Printed per rate and arm, the median over
``--runs``: the replay's own lag P50 / P99, requests dropped, and its CPU as a share
of one core over the dispatch's span (from t0 until everything is sent; start-up
and the answers after it left out: the summary's ``client.cpu_share``); then the
runs whose lag P99 was over 0.5 ms; and where any, the most that a run's dispatching
thread waited for a CPU (other processes held the cores) and the host stole.

Needs nginx. Run: ``.venv/bin/python bench/dispatch_wait.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import even_archive

from proxy import free_port, nginx_conf, process

NO_TIMERFD = """\
import tailreplay.replayer.timer as timer
timer.PreciseTimer.open = classmethod(lambda cls, loop: None)
"""
OVER_MS = 0.5

Run = dict[str, float]
"""One replay: lag P50 and P99 (ms), dropped, CPU share of a core, steal share."""


def replay(
    py: str, url: str, archive: Path, tmp: Path, args: argparse.Namespace, env: dict[str, str]
) -> Run:
    """One replay by interpreter ``py``, run from ``tmp`` (so that an interpreter with
    another commit installed does not import this checkout's)."""
    summary = tmp / "s.json"
    subprocess.run(
        [py, "-m", "tailreplay", "replay", "--target", url, "--json", str(summary),
         "--out", str(tmp / "r.msgpack"), "--overwrite", "--tail-stretch", "1",
         "--workers", str(args.workers), "--event-loop", args.event_loop, str(archive)],
        check=True, capture_output=True, env=env, cwd=tmp,
    )  # fmt: skip
    s = json.loads(summary.read_text())
    client = s.get("client") or {}
    return {
        "p50": s["lag_ms"]["p50"],
        "p99": s["lag_ms"]["p99"],
        "dropped": s["dropped"],
        "cpu": client.get("cpu_share") or 0.0,
        "steal": client.get("steal_share") or 0.0,
        "queued": client.get("cpu_wait_share") or 0.0,
    }


def arms(args: argparse.Namespace, tmp: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """Each arm's name: its interpreter and environment."""
    here = dict(os.environ)
    out = {"this checkout": (sys.executable, here)}
    if args.baseline_python:
        out["baseline"] = (str(Path(args.baseline_python).absolute()), here)
    if args.yield_arm:
        (tmp / "yield").mkdir()
        (tmp / "yield" / "sitecustomize.py").write_text(NO_TIMERFD)
        out["yield 1.5 ms"] = (sys.executable, {**here, "PYTHONPATH": str(tmp / "yield")})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="500,2000,8000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--event-loop", default="asyncio")
    parser.add_argument("--baseline-python", help="an interpreter with another commit installed")
    parser.add_argument("--yield", dest="yield_arm", action="store_true",
                        help="also the yield without a timerfd")  # fmt: skip
    args = parser.parse_args()
    rows: list[tuple[int, dict[str, list[Run]]]] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        tried = arms(args, tmp)
        port = free_port()
        conf = nginx_conf(tmp, 1, free_port(), port, fixed=port)
        with process(["nginx", "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"], port):
            url = f"http://127.0.0.1:{port}"
            for rate in (int(r) for r in args.rates.split(",")):
                archive = tmp / f"even-{rate}.msgpack"
                even_archive(archive, rate, args.seconds)
                got: dict[str, list[Run]] = {name: [] for name in tried}
                for _ in range(args.runs):
                    for name, (py, env) in tried.items():
                        got[name].append(replay(py, url, archive, tmp, args, env))
                rows.append((rate, got))
    report(args, list(tried), rows)


def _cell(runs: list[Run]) -> str:
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    over = sum(r["p99"] > OVER_MS for r in runs)
    steal, queued = max(r["steal"] for r in runs), max(r["queued"] for r in runs)
    cell = (f"{med['p50']:.2f} / {med['p99']:.2f}, {med['dropped']:,.0f}, "
            f"{med['cpu'] * 100:.0f}%, {over} of {len(runs)}")  # fmt: skip
    cell += f", queued {queued * 100:.0f}%" if queued >= 0.01 else ""
    return cell + (f", steal {steal * 100:.1f}%" if steal >= 0.0005 else "")


def report(
    args: argparse.Namespace, names: list[str], rows: list[tuple[int, dict[str, list[Run]]]]
) -> None:
    print(f"{args.seconds:g} s per rate; nginx; {args.workers} process(es) on {args.event_loop}; "
          f"median of {args.runs} runs each, alternating: lag P50 / P99 ms, dropped, CPU "
          f"(% of a core, over the dispatch), runs over {OVER_MS} ms of lag P99; where "
          "any, at most: the replay's wait for a CPU (queued) and the host's steal, as "
          "shares of the run")  # fmt: skip
    print()
    print("| rate/s |" + "".join(f" {name} |" for name in names))
    print("|---:|" + "---|" * len(names))
    for rate, got in rows:
        print(f"| {rate:,} |" + "".join(f" {_cell(got[name])} |" for name in names))


if __name__ == "__main__":
    main()
