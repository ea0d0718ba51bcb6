"""Capture -> replay fidelity: does a replay measure what its capture measured?

The shipped peak (its first ``--window``) is replayed at 1x through the capturing
proxy into simulator A; the capture is then replayed at 1x (no tail stretch) into
simulator B, identical to A. Both simulators answer the same requests the same
way, so the capture's and the replay's latency, TTFT and TPOT percentiles should
agree: the table shows them side by side, the median of ``--runs`` runs each, and
the replay's difference. Run on a quiet machine: about 5 minutes a run at 120 s.

    .venv/bin/python bench/fidelity.py --window 120s --runs 3
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tailreplay.sim.launcher import sim_process

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SIM = ["--profile", "fast", "--seed", "1"]
FIGURES = [(m, q) for m in ("latency_ms", "ttft_ms", "tpot_ms") for q in ("p50", "p95", "p99")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run(*args: str | Path) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args[:3]))} failed: {done.stderr[-2000:]}")
    return done.stdout


def _capture(work: Path, window: str) -> Path:
    """The peak's window, replayed through the proxy into simulator A: the capture."""
    with sim_process(SIM) as a:
        port = _free_port()
        proxy = subprocess.Popen(
            [BIN / "tailreplay", "proxy", "--upstream", a, "--listen", f"127.0.0.1:{port}",
             "--admin-listen", "off", "--out", work / "cap"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proxy.stdout is not None
        proxy.stdout.readline()  # listening
        try:
            target = f"http://127.0.0.1:{port}"
            _run(BIN / "replay", ROOT / "traces" / "peak.msgpack", "--to", f"+{window}",
                 "--target", target, "--out", work / "drive.msgpack")  # fmt: skip
        finally:
            proxy.terminate()
            proxy.wait(60)
    merged = work / "cap.msgpack"
    _run(BIN / "tailreplay", "traces", "merge", *sorted((work / "cap").glob("*.msgpack")),
         "-o", merged)  # fmt: skip
    return merged


def _stats(path: Path) -> dict[str, float]:
    s = json.loads(_run(BIN / "tailreplay", "traces", "stats", "--json", path))
    return {f"{m} {q}": s[m][q] for m, q in FIGURES}


def one_run(window: str) -> tuple[dict[str, float], dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        capture = _capture(work, window)
        with sim_process(SIM) as b:
            _run(BIN / "replay", capture, "--target", b, "--tail-stretch", "1",
                 "--out", work / "rep.msgpack")  # fmt: skip
        return _stats(capture), _stats(work / "rep.msgpack")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", default="120s")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [one_run(args.window) for _ in range(args.runs)]
    print(f"peak's first {args.window} at 1x, capture vs replay; median of {args.runs} runs\n")
    print("| figure | capture ms | replay ms | replay vs capture |")
    print("|---|---:|---:|---:|")
    for key in (f"{m} {q}" for m, q in FIGURES):
        cap = statistics.median(c[key] for c, _ in runs)
        rep = statistics.median(r[key] for _, r in runs)
        name = key.replace("_ms", "")
        print(f"| {name} | {cap:,.1f} | {rep:,.1f} | {100 * (rep / cap - 1):+.1f}% |")


if __name__ == "__main__":
    main()
