"""How long a replay and a simulator take to start: ``capacity`` and ``validate-model``
start one of each for every trial.

For each, the median wall time of ``--runs`` starts, beside the bare interpreter's
(``python -c pass``) measured in the same invocation, alternating:

- ``replay --dry-run`` of a 100-request archive (imports, reading, planning, the
  schedule written: a replay's start without the network);
- ``replay`` of one request against a running simulator (the above, plus the
  preflight, the warm-up, the 0.2 s lead before t0, the answer);
- ``python -m tailreplay.sim``, from spawn to its ready line.

Run: ``.venv/bin/python bench/startup.py --runs 9``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tailreplay.sim.launcher import sim_process
from tests.helpers import chat_archive


def timed(run: Callable[[], object]) -> float:
    began = time.monotonic()
    run()
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        many, one = Path(tmp) / "many.msgpack", Path(tmp) / "one.msgpack"
        chat_archive(many, 100, gap_ms=10, seed=1)
        chat_archive(one, 1, gap_ms=10, seed=1)
        out = str(Path(tmp) / "r.msgpack")

        def run(*cmd: str) -> Callable[[], object]:
            return lambda: subprocess.run([py, *cmd], capture_output=True, check=True)

        def sim() -> None:
            with sim_process(["--profile", "fast"]):
                pass

        with sim_process(["--profile", "fast"]) as url:
            cases = {
                "python -c pass (baseline)": run("-c", "pass"),
                "replay --dry-run (100 requests)": run(
                    "-m", "tailreplay", "replay", "--dry-run", "--out", out, str(many)
                ),
                "replay of 1 request (simulator)": run(
                    "-m", "tailreplay", "replay", "--target", url, "--out", out, str(one)
                ),
                "simulator start to ready": sim,
            }
            times: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.runs):
                for name, case in cases.items():
                    times[name].append(timed(case))
    base = statistics.median(times["python -c pass (baseline)"])
    print(f"median of {args.runs} runs, alternating\n")
    print("| start | median s | range s | over the bare interpreter s |")
    print("|---|---:|---|---:|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {med:.3f} | {min(ts):.3f}-{max(ts):.3f} | {med - base:.3f} |")


if __name__ == "__main__":
    main()
