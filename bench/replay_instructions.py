"""Instructions a replayed request costs, counted by valgrind (callgrind): a figure that
does not move with the machine's load, where a paced replay's CPU share moves by a
quarter from run to run (``bench/replay_ablations.py`` prints that spread).

Each arm replays evenly spaced chat requests (``bench/replay.py``'s ``even_archive``)
to nginx under ``valgrind --tool=callgrind`` twice, at ``--rate`` and at twice it for
the same ``--seconds``; the difference in instructions over the difference in requests
is one request's cost, the start-up and the per-second work (progress, the loop's
watch) cancelled out. The two runs of an arm go side by side (valgrind slows a replay
about fiftyfold, so the rates are low); the timer's busy wait before each send is off
in every arm (``WakeMargin.at`` returns 0), so the count does not depend on how late
the host wakes the process. Arms are ``bench/replay_ablations.py``'s: ``whole``, a part
taken away (``no-build``, ``no-archive``, ``no-answer``, ...), or ``uvloop``.

Printed: instructions a request per arm, and the difference from ``whole``. Repeat
runs of one arm agreed within 0.3% here. Needs nginx and valgrind. Run:
``.venv/bin/python bench/replay_instructions.py --arms whole,no-answer``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import even_archive
from replay_ablations import EXTRA_ARGS, TAKEN_AWAY

from proxy import free_port, nginx, process

NO_WAIT = (
    'import sys\nif "replay" in sys.argv:\n'
    "    import tailreplay.replayer.timer as timer\n"
    "    timer.WakeMargin.at = lambda self, due: 0.0\n"
)


def instructions(err: str) -> int:
    """The total callgrind reports on stderr ("I   refs: 3,808,117,985")."""
    found = re.search(r"I\s+refs:\s+([\d,]+)", err)
    if found is None:
        raise SystemExit(f"no instruction count from valgrind:\n{err[-2000:]}")
    return int(found[1].replace(",", ""))


def arm_cost(arm: str, url: str, archives: tuple[Path, Path], apart: int, tmp: Path) -> float:
    """One arm: instructions a request, from its two runs side by side (the second
    sends ``apart`` requests more)."""
    site = tmp / f"site-{arm}"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NO_WAIT + TAKEN_AWAY[arm])
    env = {**os.environ, "PYTHONPATH": str(site), "OPENBLAS_NUM_THREADS": "1"}
    runs = []
    for i, archive in enumerate(archives):
        valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.{arm}.{i}"]
        replay = ["-m", "tailreplay", "replay", str(archive), "--target", url]
        cmd = [*valgrind, sys.executable, *replay, "--tail-stretch", "1", *EXTRA_ARGS.get(arm, [])]
        if arm != "no-archive":
            cmd += ["--out", str(tmp / f"r{i}.msgpack"), "--overwrite"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        runs.append(subprocess.Popen(cmd, env=env, cwd=tmp, text=True, **quiet))
    counts = [instructions(run.communicate()[1]) for run in runs]
    return (counts[1] - counts[0]) / apart


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--arms", default="whole,no-build,no-answer,uvloop")
    args = parser.parse_args()
    arms = args.arms.split(",")
    cost: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        port = free_port()
        slow, fast = tmp / "slow.msgpack", tmp / "fast.msgpack"
        apart = even_archive(fast, 2 * args.rate, args.seconds)
        apart -= even_archive(slow, args.rate, args.seconds)
        with process(nginx(tmp, 1, free_port(), port, fixed=port), port):
            for arm in arms:
                cost[arm] = arm_cost(arm, f"http://127.0.0.1:{port}", (slow, fast), apart, tmp)
    runs = f"{args.rate}/s and {2 * args.rate}/s for {args.seconds:g} s at nginx"
    print(f"{runs}, under callgrind; the busy wait before each send off")
    print()
    print("| arm | instructions a request | against whole |")
    print("|---|---:|---:|")
    whole = cost.get("whole")
    for arm, n in cost.items():
        against = "" if whole is None else f"{n - whole:+,.0f} ({(n - whole) / whole:+.0%})"
        print(f"| {arm} | {n:,.0f} | {against} |")


if __name__ == "__main__":
    main()
