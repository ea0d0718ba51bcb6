"""The stream timeline's cost per SSE event, against another commit's in the same run.

Every streamed answer the proxy relays and every one the replayer measures goes
through ``tailreplay.http.sse.StreamTimeline.feed``, chunk by chunk. This times it on a
chat stream of 1,000 one-token events, each arriving as its own read (the usual
case), with LF and with CRLF line ends, and on the same stream cut into 7-byte
reads; the baseline is ``tailreplay/http/sse.py`` (``tailreplay/sse.py`` in older
commits) as of ``--baseline`` (it must take a ``Dialect``, as this one does).
Median of ``--runs`` runs, each the best of 5 repeats; the ratio is this tree's over
the baseline's.

    .venv/bin/python bench/sse_timeline.py --baseline 945496a --runs 5
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from tailreplay.dialects import dialect_named
from tailreplay.http import sse

ROOT = Path(__file__).resolve().parents[1]
CHAT = dialect_named("chat")


def _baseline(commit: str, work: Path) -> ModuleType:
    for where in ("tailreplay/http/sse.py", "tailreplay/sse.py"):
        shown = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{commit}:{where}"],
            capture_output=True,
            text=True,
        )
        if shown.returncode == 0:
            break
    shown.check_returncode()
    source = shown.stdout
    path = work / "sse_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("sse_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _streams() -> dict[str, list[bytes]]:
    chunk = {"object": "chat.completion.chunk", "choices": [{"delta": {"content": " w"}}]}
    events = [b"data: " + json.dumps(chunk).encode() + b"\n\n" for _ in range(1000)]
    whole = b"".join(events)
    return {
        "one event a read, LF": events,
        "one event a read, CRLF": [e.replace(b"\n\n", b"\r\n\r\n") for e in events],
        "7-byte reads, LF": [whole[i : i + 7] for i in range(0, len(whole), 7)],
    }


def _per_event_us(module: ModuleType, reads: list[bytes]) -> float:
    def run() -> None:
        t = module.StreamTimeline(CHAT)
        for i, read in enumerate(reads):
            t.feed(read, i)
        t.finish(len(reads))

    best = min(timeit.repeat(run, number=10, repeat=5)) / 10
    return best / 1000 * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default="945496a")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = _baseline(args.baseline, Path(tmp))
        print(f"StreamTimeline.feed, µs per event; median of {args.runs} runs\n")
        print(f"| stream | {args.baseline} | this tree | ratio |")
        print("|---|---:|---:|---:|")
        for name, reads in _streams().items():
            timed: dict[str, list[float]] = {"base": [], "this": []}
            runs: list[tuple[str, Callable[[], float]]] = [
                ("base", lambda r=reads: _per_event_us(base, r)),
                ("this", lambda r=reads: _per_event_us(sse, r)),
            ]
            for _ in range(args.runs):  # interleaved, so drift hits both alike
                for key, measure in runs:
                    timed[key].append(measure())
            b, t = statistics.median(timed["base"]), statistics.median(timed["this"])
            print(f"| {name} | {b:.2f} | {t:.2f} | {t / b:.2f} |")


if __name__ == "__main__":
    main()
