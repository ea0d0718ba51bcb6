"""The dispatcher's last wait before each send: a timerfd, or a busy yield.

For each rate, an archive of evenly spaced requests is replayed for 5 s at nginx
returning a fixed body, by one process and by ``--workers 2``, alternating two
waits: the dispatcher as it is (a timerfd until 0.25 ms before due, then yielding
to the loop) and with the timerfd turned off (yielding for the whole 1.5 ms before
each send, as where there is no timerfd). Printed per rate and arm: the median over
``--runs`` of the lag P50/P99 and of the CPU seconds the replay's processes used
(start-up included), and the CPU ratio timerfd / yield.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="300,1000,2500")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "yield").mkdir()
        (tmp / "yield" / "sitecustomize.py").write_text(NO_TIMERFD)
        envs = {
            "timerfd": dict(os.environ),
            "yield": {**os.environ, "PYTHONPATH": str(tmp / "yield")},
        }
        port = free_port()
        conf = nginx_conf(tmp, 1, free_port(), port, fixed=port)
        rows = []
        with process(["nginx", "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"], port):
            url = f"http://127.0.0.1:{port}"
            for rate in (int(r) for r in args.rates.split(",")):
                archive = tmp / f"even-{rate}.msgpack"
                even_archive(archive, rate, 5.0)
                for workers in (1, 2):
                    got: dict[str, list[tuple]] = {"timerfd": [], "yield": []}
                    for _ in range(args.runs):
                        for wait, env in envs.items():
                            got[wait].append(replay(url, archive, tmp, workers, env))
                    rows.append((rate, workers, got))
    print(f"5 s per rate; nginx; median of {args.runs} runs each, alternating")
    print()
    print("| rate/s | processes | timerfd: lag P50 / P99 ms | yield: lag P50 / P99 ms "
          "| CPU s timerfd / yield | ratio |")  # fmt: skip
    print("|---:|---:|---|---|---|---:|")
    for rate, workers, got in rows:
        med = {w: [statistics.median(x[i] for x in runs) for i in range(3)]
               for w, runs in got.items()}  # fmt: skip
        t, y = med["timerfd"], med["yield"]
        print(f"| {rate:,} | {workers} | {t[0]:.2f} / {t[1]:.2f} | {y[0]:.2f} / {y[1]:.2f} "
              f"| {t[2]:.1f} / {y[2]:.1f} | {t[2] / y[2]:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
