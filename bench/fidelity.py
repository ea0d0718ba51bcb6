"""Capture -> replay fidelity: does a replay measure what its capture measured?

The shipped peak (its first ``--window``) is replayed at 1x through the capturing
proxy into simulator A; the capture is then replayed at 1x (no tail stretch) into
simulator B, identical to A. Both simulators answer the same requests the same
way, so the capture's and the replay's latency, TTFT and TPOT percentiles should
agree: the table shows them side by side, the median of ``--runs`` runs each, and
the replay's difference. Run on a quiet machine: about 5 minutes a run at 120 s.

``--dialect`` sends the peak's requests as that API dialect's (the peak is chat; its
records are re-addressed to the dialect's route and the replayer builds each body
from the recorded lengths), so every dialect's capture and replay are held to the
same figures; ``--dialect all`` runs each in turn.

    .venv/bin/python bench/fidelity.py --window 120s --runs 3
    .venv/bin/python bench/fidelity.py --window 30s --runs 3 --dialect all
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

from tailreplay.dialects import DIALECTS, dialect_named
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader

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


def _as_dialect(work: Path, name: str) -> Path:
    """The peak with every record addressed to ``name``'s first route; bodies are built
    by the replayer from the recorded lengths, streamed where the dialect streams."""
    dialect = dialect_named(name)
    peak = ROOT / "traces" / "peak.msgpack"
    if name == "chat":
        return peak
    maps = []
    for m in ArchiveReader([peak], order="file").iter_maps():
        m["path"] = dialect.routes[0]
        if not dialect.stream_ends:
            m["stream"] = False
        maps.append(m)
    out = work / f"peak-{name}.msgpack"
    write_archive(out, make_header(f"peak as {name}", ordered=True), maps)
    return out


def _capture(work: Path, window: str, dialect: str) -> Path:
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
            _run(BIN / "replay", _as_dialect(work, dialect), "--to", f"+{window}",
                 "--target", target, "--out", work / "drive.msgpack")  # fmt: skip
        finally:
            proxy.terminate()
            proxy.wait(60)
    merged = work / "cap.msgpack"
    _run(BIN / "tailreplay", "traces", "merge", *sorted((work / "cap").glob("*.msgpack")),
         "-o", merged)  # fmt: skip
    return merged


def _stats(path: Path) -> dict[str, float | None]:
    s = json.loads(_run(BIN / "tailreplay", "traces", "stats", "--json", path))
    return {f"{m} {q}": (s.get(m) or {}).get(q) for m, q in FIGURES}


def one_run(window: str, dialect: str) -> tuple[dict[str, float | None], dict[str, float | None]]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        capture = _capture(work, window, dialect)
        with sim_process(SIM) as b:
            _run(BIN / "replay", capture, "--target", b, "--tail-stretch", "1",
                 "--out", work / "rep.msgpack")  # fmt: skip
        return _stats(capture), _stats(work / "rep.msgpack")


def _table(window: str, dialect: str, runs: int) -> None:
    done = [one_run(window, dialect) for _ in range(runs)]
    print(f"\n{dialect}: peak's first {window} at 1x, capture vs replay; median of {runs} runs\n")
    print("| figure | capture ms | replay ms | replay vs capture |")
    print("|---|---:|---:|---:|")
    for key in (f"{m} {q}" for m, q in FIGURES):
        caps = [c[key] for c, _ in done]
        reps = [r[key] for _, r in done]
        if None in caps or None in reps:
            continue  # no such figure for this dialect (embeddings: no tokens out)
        cap = statistics.median(x for x in caps if x is not None)
        rep = statistics.median(x for x in reps if x is not None)
        name = key.replace("_ms", "")
        print(f"| {name} | {cap:,.1f} | {rep:,.1f} | {100 * (rep / cap - 1):+.1f}% |")


def main() -> None:
    names = [d.name for d in DIALECTS]
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", default="120s")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dialect", default="chat", choices=[*names, "all"])
    args = parser.parse_args()
    for dialect in names if args.dialect == "all" else [args.dialect]:
        _table(args.window, dialect, args.runs)


if __name__ == "__main__":
    main()
