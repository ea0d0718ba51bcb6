"""The dispatcher's last wait before each send: a timerfd, or a busy yield.

For each rate, an archive of evenly spaced requests is replayed for 5 s at nginx
returning a fixed body, by one process and by ``--workers 2``, alternating three
waits: the dispatcher as it is (a timerfd until a window before due, then yielding
to the loop; the window 0.25 ms, wider while wake-ups come late: ``timer.WakeWindow``),
with the window fixed at 0.25 ms, and with the timerfd turned off (yielding for the
whole 1.5 ms before each send, as where there is no timerfd). Printed per rate and
arm: the median over ``--runs`` of the lag P50/P99 and of the CPU seconds the
replay's processes used (start-up included), the runs whose lag P99 was over 0.5 ms,
and the CPU ratio against the yield.

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
FIXED = """\
import tailreplay.replayer.timer as timer
timer.WakeWindow.woke = lambda self, late_s: None
"""
OVER_MS = 0.5


def replay(url: str, archive: Path, tmp: Path, workers: int, env: dict[str, str]) -> tuple:
    """(lag P50 ms, lag P99 ms, CPU s) of one replay."""
    before = os.times()
    subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", "--target", url, "--json",
         str(tmp / "s.json"), "--out", str(tmp / "r.msgpack"), "--tail-stretch", "1",
         "--workers", str(workers), str(archive)],
        check=True, capture_output=True, env=env,
    )  # fmt: skip
    after = os.times()
    lag = json.loads((tmp / "s.json").read_text())["lag_ms"]
    cpu = after.children_user + after.children_system
    return lag["p50"], lag["p99"], cpu - before.children_user - before.children_system


ARMS = {"adapting": None, "fixed 0.25 ms": FIXED, "yield 1.5 ms": NO_TIMERFD}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="300,1000,2500")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        envs = {}
        for n, (name, patch) in enumerate(ARMS.items()):
            envs[name] = dict(os.environ)
            if patch is not None:
                (tmp / str(n)).mkdir()
                (tmp / str(n) / "sitecustomize.py").write_text(patch)
                envs[name]["PYTHONPATH"] = str(tmp / str(n))
        port = free_port()
        conf = nginx_conf(tmp, 1, free_port(), port, fixed=port)
        rows = []
        with process(["nginx", "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"], port):
            url = f"http://127.0.0.1:{port}"
            for rate in (int(r) for r in args.rates.split(",")):
                archive = tmp / f"even-{rate}.msgpack"
                even_archive(archive, rate, 5.0)
                for workers in (1, 2):
                    got: dict[str, list[tuple]] = {name: [] for name in envs}
                    for _ in range(args.runs):
                        for wait, env in envs.items():
                            got[wait].append(replay(url, archive, tmp, workers, env))
                    rows.append((rate, workers, got))
    report(args.runs, rows)


def report(runs: int, rows: list) -> None:
    print(f"5 s per rate; nginx; median of {runs} runs each, alternating; lag P50 / P99 ms, "
          f"runs over {OVER_MS} ms of lag P99, CPU s (ratio to the yield)")  # fmt: skip
    print()
    print("| rate/s | processes |" + "".join(f" {name} |" for name in ARMS))
    print("|---:|---:|" + "---|" * len(ARMS))
    for rate, workers, got in rows:
        med = {w: [statistics.median(x[i] for x in runs) for i in range(3)]
               for w, runs in got.items()}  # fmt: skip
        over = {w: sum(x[1] > OVER_MS for x in runs) for w, runs in got.items()}
        base = med["yield 1.5 ms"][2]
        cells = [f"{m[0]:.2f} / {m[1]:.2f}, {over[w]} of {runs}, {m[2]:.1f} s ({m[2] / base:.2f})"
                 for w, m in med.items()]  # fmt: skip
        print(f"| {rate:,} | {workers} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
