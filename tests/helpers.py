"""Shared test helpers: archives written the plain way, as docs/archive-format.md allows."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import pytest

REPO = Path(__file__).resolve().parents[1]
"""The repository's root: tests/ mirrors the packages, so a test finds files from here."""
DATA = REPO / "tests" / "data"
"""Public traces and samples the tests read, byte for byte (tests/data/README.md)."""

HEADER = {
    "format": "tailreplay",
    "version": 1,
    "created_ns": 1_700_000_000 * 10**9,
    "source": "test",
}


def write_plain(
    path: Path, maps: list[dict[str, Any]], header: dict[str, Any] | None = None
) -> Path:
    """An archive written with a bare msgpack.packb loop — no tailreplay code involved."""
    with open(path, "wb") as f:
        f.write(msgpack.packb(header or HEADER))
        for m in maps:
            f.write(msgpack.packb(m))
    return path


def random_maps(
    n: int, seed: int = 7, start_ns: int = 1_700_000_000 * 10**9
) -> list[dict[str, Any]]:
    """Realistic-looking exchanges: mixed streams, errors, some fields missing."""
    rng = random.Random(seed)
    t = start_ns
    out = []
    for _ in range(n):
        t += rng.randint(0, 2 * 10**8)  # ties happen (gap 0) as in real traces
        m: dict[str, Any] = {
            "start_ns": t,
            "trace_id": rng.randbytes(16),
            "span_id": rng.randbytes(8),
            "method": "POST",
            "path": rng.choice(["/v1/chat/completions", "/v1/completions"]),
            "status": rng.choice([200] * 30 + [429, 500, 0]),
            "stream": rng.random() < 0.7,
            "input_tokens": rng.randint(1, 4000),
            "model": rng.choice(["llama-3-8b", "qwen2-7b"]),
        }
        if m["status"] == 0:
            m["error"] = "upstream_connect"
        else:
            m["duration_ns"] = rng.randint(10**7, 2 * 10**10)
            m["ttfb_ns"] = rng.randint(10**6, m["duration_ns"])
            m["output_tokens"] = rng.randint(1, 900)
        out.append(m)
    return out


async def metric(base_url: str, name: str) -> float:
    """The first sample of ``name`` on ``base_url``/metrics (Prometheus text)."""
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(base_url + "/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith((name + "{", name + " ")):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def chat_archive(
    path: Path, n: int, *, gap_ms: float, seed: int, model: str = "llama-3-8b", **extra: Any
) -> list[dict[str, Any]]:
    """``n`` chat-completion records ``gap_ms`` apart, written plainly; returns the maps.

    Each has its own random trace and span id (seeded: distinct seeds, distinct
    traces), streams alternate, and a recorded duration; ``extra`` sets more fields
    on every record.
    """
    rng = random.Random(seed)
    maps = [
        {
            "start_ns": 1_700_000_000 * 10**9 + round(i * gap_ms * 1e6),
            "trace_id": rng.randbytes(16),
            "span_id": rng.randbytes(8),
            "method": "POST",
            "path": "/v1/chat/completions",
            "model": model,
            "stream": i % 2 == 0,
            "status": 200,
            "input_tokens": rng.randint(20, 200),
            "output_tokens": rng.randint(2, 8),
            "duration_ns": rng.randint(10**7, 10**9),
            **extra,
        }
        for i in range(n)
    ]
    write_plain(path, maps)
    return maps


def free_port() -> int:
    """A loopback port nothing listens on (free when asked; tests bind it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A child's own peak RSS: VmHWM of the process after exec. (getrusage's ru_maxrss
# also counts the parent's memory the child was forked with.)
_MEASURED = """
import atexit, sys
from pathlib import Path
out = Path(sys.argv.pop(1))
def peak():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            out.write_text(line.split()[1])
atexit.register(peak)
from tailreplay.cli import main
main()
"""


def run_measured(
    args: list[str], tmp: Path, *, timeout_s: float, env: dict[str, str] | None = None
) -> tuple[int, str, float]:
    """Run ``tailreplay ARGS`` in its own process: (exit code, stderr, peak RSS in MB).

    Killed, and a ``TimeoutError``, past ``timeout_s``."""
    peak, err_path = tmp / "peak_kb", tmp / "stderr"
    peak.unlink(missing_ok=True)
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _MEASURED, str(peak), *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, **(env or {})},
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise TimeoutError(f"tailreplay {' '.join(args)} ran past {timeout_s} s") from None
    kb = int(peak.read_text()) if peak.exists() else 0
    return code, err_path.read_text(), kb / 1024


# A busy machine (other work on a shared CI host) makes a replay send late and the
# built-in simulator step slower than its model. A test of behaviour runs its replay
# with no lag limit (UNBOUND) and asserts nothing of timing; the timing figures are
# `perf` tests (`make test-perf`), which assert them on a quiet machine.


UNBOUND = ("--lag-limit", "1h")
"""For a replay whose test is of behaviour, not timing: a busy machine's late sends never
make the client the limit, so the run's exit code is the behaviour's alone."""


def assert_client_verdict_consistent(summary: dict[str, Any], stdout: str) -> None:
    """A replay's client verdict agrees with the lag it reports and with what it told its
    user: client-bound exactly when dispatch lag P99 is over its limit, and then (only
    then) the warning line on ``stdout``. It judges no timing."""
    client, lag_p99 = summary["client"], summary["lag_ms"]["p99"]
    assert client["lag_p99_ms"] == pytest.approx(lag_p99)
    warned = "warning: the client was the bottleneck: dispatch lag P99" in stdout
    over = lag_p99 > client["lag_limit_ms"]
    assert client["client_bound"] == over == warned, (client, stdout[-2000:])


def sim_steps(url: str) -> tuple[float, float]:
    """The built-in simulator's steps so far: (modelled, achieved) seconds, summed over
    its models (as ``tailreplay.studies.trial.sim_slowdown`` reads them)."""
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    sums = {"modelled": 0.0, "achieved": 0.0}
    for line in text.splitlines():
        for kind in sums:
            if line.startswith(f"tailreplay_sim_step_{kind}_seconds_total"):
                sums[kind] += float(line.rsplit(" ", 1)[1])
    return sums["modelled"], sums["achieved"]


def sim_slowdown_between(before: tuple[float, float], after: tuple[float, float]) -> float:
    """How much longer than modelled the simulator's steps took between two
    ``sim_steps`` reads (0.1: 10%); 0.0 when it ran no step."""
    modelled, achieved = after[0] - before[0], after[1] - before[1]
    return achieved / modelled - 1 if modelled > 0 else 0.0


class PastDeadline(BaseException):
    """Not an Exception (nor a TimeoutError, which is an OSError): nothing in a
    command may catch it and call it an error of the input."""


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Fail (rather than hang) when ``what`` runs past ``seconds``."""

    def expired(signum: int, frame: object) -> None:
        raise PastDeadline(f"{what} ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def one_verdict(result: Any, what: str) -> str | None:
    """Assert a command run through CliRunner ended as a command should on any input:
    no traceback, exit 0 or 3, and on 3 exactly one ``Error:`` line, the last one.
    Returns that line (None on exit 0)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        what,
        result.exc_info,
    )
    assert "Traceback" not in result.output, what
    assert result.exit_code in (0, 3), what
    if result.exit_code == 0:
        return None
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], what
    return errors[0]


TWIN_HIDDEN = {
    "prefill_base_ms": 4.0 * 2.5,
    "prefill_per_token_ms": 0.0125 * 4,
    "decode_base_ms": 6.0 * 5,
    "decode_per_seq_ms": 0.04 * 15,
}
"""A real target's costs for a twin to find (the calibration test, ``bench/twin.py``): the
fast profile's, scaled by factors the fit is not told. Steps of 30-60 ms keep a busy
machine's timer jitter (~1 ms) small against them, and the simulator's own CPU (a few
streams' tokens written per step) low."""


def drifting_lengths(path: Path, n: int = 20_000) -> Path:
    """Poisson arrivals at 20 req/s; input tokens Gamma(2, 300) over the first half of
    the span and Gamma(2, 200) over the second (means 600 and 400); outputs alike."""
    import numpy as np

    rng = np.random.default_rng(5)
    starts = 1_700_000_000 * 10**9 + np.cumsum(rng.exponential(1 / 20, n) * 1e9).astype(np.int64)
    late = np.arange(n) >= n // 2
    inputs = np.ceil(rng.gamma(2.0, np.where(late, 200.0, 300.0))).astype(int)
    outputs = np.ceil(rng.gamma(1.5, 80.0, n)).astype(int)
    maps = [
        {"start_ns": int(s), "trace_id": rng.bytes(16), "span_id": rng.bytes(8),
         "path": "/v1/chat/completions", "input_tokens": int(a), "output_tokens": int(b)}
        for s, a, b in zip(starts, inputs, outputs, strict=True)
    ]  # fmt: skip
    return write_plain(path, maps)


def ramping_window(
    path: Path,
    seconds: float,
    rate_to: float,
    seed: int,
    *,
    rate_from: float = 1.0,
    prompt_max: int = 3000,
) -> int:
    """A recorded window of streamed chat requests, for a twin's calibration: arrivals
    whose rate ramps from ``rate_from`` to ``rate_to`` per second (so the batch grows from
    1 to a few dozen), prompts of 30..``prompt_max`` tokens (log-uniform), answers of
    20..60 tokens. Returns how many requests it holds."""
    import numpy as np

    from tailreplay.traces.archive.format import make_header
    from tailreplay.traces.archive.record import Record
    from tailreplay.traces.archive.writer import ArchiveWriter

    rng = np.random.default_rng(seed)
    t, times = 0.0, []
    while (t := t + rng.exponential(1 / rate_to)) < seconds:
        if rng.random() < (rate_from + (rate_to - rate_from) * t / seconds) / rate_to:
            times.append(t)
    with ArchiveWriter(path, header=make_header("test")) as writer:
        for at in times:
            out = int(rng.integers(20, 61))
            writer.append(
                Record(
                    start_ns=1_700_000_000 * 10**9 + int(at * 1e9),
                    method="POST",
                    path="/v1/chat/completions",
                    model="twin-model",
                    stream=True,
                    input_tokens=int(np.exp(rng.uniform(np.log(30), np.log(prompt_max)))),
                    output_tokens=out,
                    max_tokens=out,
                    status=200,
                    duration_ns=10**9,
                )
            )
    return len(times)


def warm_llama(url: str, slots: int, rounds: int = 2) -> None:
    """Every slot of a llama-server at ``url`` through a prompt of about 300 tokens and
    32 answer tokens, ``rounds`` times, before anything is measured: its first requests
    run slower than later ones (a 66-token prompt took 196 ms first, about 130 ms
    later), which a calibration would fit as the server's speed."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 30)
    body = json.dumps({"prompt": prompt, "n_predict": 32, "cache_prompt": False}).encode()

    def one(_: int) -> None:
        ask = urllib.request.Request(
            url + "/completion", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(ask, timeout=120) as answer:
            assert answer.status == 200

    with ThreadPoolExecutor(slots) as pool:
        for _ in range(rounds):
            list(pool.map(one, range(slots)))


@contextmanager
def served(
    cmd: list[str], url: str, ready: str, log: Path, *, start_s: float = 120
) -> Iterator[str]:
    """A server process (``cmd``, its output to ``log``) once ``url + ready`` answers, for
    the end-to-end tests and benches against a real engine: yields ``url``; fails with the
    log's tail if it exits or does not start within ``start_s``, or dies meanwhile."""
    import time

    with open(log, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + start_s
            while True:
                try:
                    urllib.request.urlopen(url + ready, timeout=2)
                    break
                except OSError:
                    assert proc.poll() is None, f"{cmd[0]} exited: {log_tail(log)}"
                    assert time.monotonic() < deadline, f"{cmd[0]} did not start: {log_tail(log)}"
                    time.sleep(0.5)
            yield url
            assert proc.poll() is None, f"{cmd[0]} died meanwhile: {log_tail(log)}"
        finally:
            proc.terminate()
            proc.wait(30)


def log_tail(log: Path) -> str:
    return log.read_bytes()[-2000:].decode("utf-8", "replace")
