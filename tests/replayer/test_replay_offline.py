"""`replay --offline`: the built-in simulator's engine serving the schedule in-process
on a virtual clock. Its figures are the time model's exactly, and they agree with a
live replay against `tailreplay sim` with the same profile."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tailreplay.sim.profiles import PROFILES
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.reader import ArchiveReader, read_header
from tailreplay.traces.results.figures import metric_values
from tailreplay.traces.results.stats import STATS_FIELDS, STATS_PRESENCE, requests
from tests.helpers import REPO, TWIN_HIDDEN, ramping_window, write_plain

T0 = 1_700_000_000 * 10**9
HIDDEN = [f"--sim-arg=--{k.replace('_', '-')}={v}" for k, v in TWIN_HIDDEN.items()]


def _replay(archive: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tailreplay", "replay", str(archive), "--out", str(out),
           "--tail-stretch", "1", "--lag-limit", "1h", *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


def _figures(results: Path) -> dict[str, np.ndarray]:
    cols = load_columns([results], list(STATS_FIELDS), presence_only=STATS_PRESENCE)
    return metric_values(requests(cols))


def test_one_request_alone_is_timed_as_the_model_says(tmp_path: Path) -> None:
    archive = write_plain(tmp_path / "a.msgpack", [
        {"start_ns": T0, "method": "POST", "path": "/v1/chat/completions", "stream": True,
         "input_tokens": 800, "output_tokens": 5},
    ])  # fmt: skip
    done = _replay(archive, tmp_path / "r.msgpack", "--offline", *HIDDEN)
    assert done.returncode == 0, done.stderr
    (r,) = list(ArchiveReader([tmp_path / "r.msgpack"]))
    p = PROFILES["fast"].with_overrides(**TWIN_HIDDEN)
    first_ms = p.prefill_ms(800)  # its first token comes at the end of its prefill step
    step_us = round(p.decode_ms(1) * 1000)
    assert r.status == 200 and r.output_tokens == 5 and r.input_tokens == 800
    assert r.ttfb_ns == pytest.approx(first_ms * 1e6, abs=1_000)
    assert r.chunk_gaps_us == pytest.approx([step_us] * 4, abs=2)
    assert r.duration_ns == pytest.approx((first_ms + 4 * p.decode_ms(1)) * 1e6, abs=1_000)
    assert r.lag_ns == 0 and r.cached_tokens == 0
    header = read_header(tmp_path / "r.msgpack")
    assert header["builtin"].startswith("offline, on a virtual clock: profile fast")


def test_offline_agrees_with_a_live_replay_on_the_same_profile(tmp_path: Path) -> None:
    # 20 s of arrivals ramping to 14 a second, batches of up to a few dozen: queues form.
    archive = tmp_path / "window.msgpack"
    n = ramping_window(archive, seconds=20.0, rate_to=14.0, seed=11)
    began = time.monotonic()
    off = _replay(archive, tmp_path / "off.msgpack", "--offline", *HIDDEN, "--seed", "3")
    offline_s = time.monotonic() - began
    assert off.returncode == 0, off.stderr
    live = _replay(archive, tmp_path / "live.msgpack", *HIDDEN, "--seed", "3")
    assert live.returncode == 0, live.stderr
    a, b = _figures(tmp_path / "off.msgpack"), _figures(tmp_path / "live.msgpack")
    assert len(a["latency"]) == len(b["latency"]) == n
    for name in ("ttft", "latency"):
        for q in (50, 99):
            offline, measured = np.percentile(a[name], q), np.percentile(b[name], q)
            # The live run adds its HTTP path (a few ms) and a busy machine's timer
            # jitter to steps of 30-60 ms; the model is the same.
            assert offline == pytest.approx(measured, rel=0.15), (name, q, offline, measured)
    # Seconds, where the live replay takes the window's 20 (start-up is most of it).
    assert offline_s < 20, offline_s


@pytest.mark.parametrize(
    "extra",
    [["--target", "http://127.0.0.1:9"], ["--dry-run"], ["--workers", "2"], ["--users", "3"]],
)
def test_what_needs_a_live_run_is_refused(tmp_path: Path, extra: list[str]) -> None:
    archive = write_plain(tmp_path / "a.msgpack", [{"start_ns": T0, "input_tokens": 10}])
    done = _replay(archive, tmp_path / "r.msgpack", "--offline", *extra)
    assert done.returncode == 2, done.stderr
    assert "--offline serves the replay in this process" in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "r.msgpack").exists()


def test_the_summary_json_says_what_was_served(tmp_path: Path) -> None:
    archive = tmp_path / "window.msgpack"
    n = ramping_window(archive, seconds=5.0, rate_to=10.0, seed=2)
    summary = tmp_path / "s.json"
    done = _replay(archive, tmp_path / "r.msgpack", "--offline", "--json", str(summary))
    assert done.returncode == 0, done.stderr
    data = json.loads(summary.read_text())
    assert data["sent"] == data["completed"] == n and data["dropped"] == 0
    assert "--offline: served in this process on a virtual clock" in done.stderr


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--timeout", "50ms"], "--timeout"),
        (["--max-inflight", "1"], "--max-inflight"),
        (["--slo-stop", "now", "--slo", "latency:p99<=1s"], "--slo-stop"),
        (["--model-map", "a=b"], "--model-map"),
        (["--sim-arg=--fault-error-rate=0.5"], "--fault-error-rate"),
        (["--sim-arg=--no-prefix-cache"], "--no-prefix-cache"),
        (["--sim-arg=--spec-tokens=4"], "--spec-tokens"),
    ],
)
def test_what_the_offline_engine_would_ignore_is_refused(
    tmp_path: Path, extra: list[str], named: str
) -> None:
    archive = write_plain(tmp_path / "a.msgpack", [{"start_ns": T0, "input_tokens": 10}])
    done = _replay(archive, tmp_path / "r.msgpack", "--offline", *extra)
    assert done.returncode == 2, done.stderr
    assert f"{named} need a live run" in done.stderr, done.stderr
    assert not (tmp_path / "r.msgpack").exists()


def test_a_prompt_longer_than_any_engine_serves_is_cut_and_said(tmp_path: Path) -> None:
    """An archive's ``input_tokens`` holds up to 2^32 - 1: a prompt that long made up
    (and an engine sized for it) would take the machine's memory. It is sent as
    ``MOST_INPUT_TOKENS``, and the run says so."""
    from tailreplay.replayer.schedule import MOST_INPUT_TOKENS

    chat = {"method": "POST", "path": "/v1/chat/completions", "stream": True}
    archive = write_plain(tmp_path / "a.msgpack", [
        {"start_ns": T0, **chat, "input_tokens": 2**32 - 1, "output_tokens": 5},
        {"start_ns": T0 + 10**9, **chat, "input_tokens": 100, "output_tokens": 5},
    ])  # fmt: skip
    done = _replay(archive, tmp_path / "r.msgpack", "--offline")
    assert done.returncode == 0, done.stderr
    assert f"1 requests ask for more than {MOST_INPUT_TOKENS:,} prompt tokens" in done.stderr
    huge, small = sorted(ArchiveReader([tmp_path / "r.msgpack"]), key=lambda r: r.start_ns)
    assert small.status == 200 and small.output_tokens == 5
    # Sized to hold it (the context grows with the longest request), and served.
    assert huge.status == 200 and huge.input_tokens == MOST_INPUT_TOKENS


def test_calls_that_generate_nothing_are_answered_as_the_simulator_answers_them(
    tmp_path: Path,
) -> None:
    """``GET /v1/models`` at once, without the engine; an embedding in one step (its
    prefill), with no output tokens; neither takes a generation's steps."""
    p = PROFILES["fast"].with_overrides(**TWIN_HIDDEN)
    archive = write_plain(tmp_path / "a.msgpack", [
        {"start_ns": T0, "method": "GET", "path": "/v1/models"},
        {"start_ns": T0 + 10**9, "method": "POST", "path": "/v1/embeddings", "stream": False,
         "input_tokens": 800},
        {"start_ns": T0 + 2 * 10**9, "method": "POST", "path": "/v1/chat/completions",
         "stream": True, "input_tokens": 800, "output_tokens": 5},
    ])  # fmt: skip
    done = _replay(archive, tmp_path / "r.msgpack", "--offline", *HIDDEN)
    assert done.returncode == 0, done.stderr
    results = sorted(ArchiveReader([tmp_path / "r.msgpack"]), key=lambda r: r.start_ns)
    models, embedding, chat = results
    assert models.status == 200 and models.duration_ns == 0 and not models.output_tokens
    assert embedding.status == 200 and embedding.output_tokens == 0
    # Its one step is its prefill's; the chat request after it found the engine idle.
    assert embedding.duration_ns == pytest.approx(p.prefill_ms(800) * 1e6, abs=1_000)
    assert chat.status == 200 and chat.output_tokens == 5
    assert chat.ttfb_ns == pytest.approx(p.prefill_ms(800) * 1e6, abs=1_000)


def _file_size_limit(size: int) -> Callable[[], None]:
    """A child whose files stop at ``size`` bytes: a full disk, as its writes see it."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write(), not death
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def test_results_the_disk_could_not_take_are_an_error_exit_3(tmp_path: Path) -> None:
    """A result archive that could not be written whole: the run says how many results
    it lost and why, and exits 3 (it exited 0, and its report then read the lost
    results as never sent)."""
    peak = str(REPO / "traces/peak.msgpack")
    args = [peak, "--limit", "300", "--offline", "--out", "r.msgpack", "--json", "s.json"]
    run = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", *args],
        preexec_fn=_file_size_limit(8192),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 3, run.stderr
    (line,) = [ln for ln in run.stderr.splitlines() if ln.startswith("Error:")]
    assert line.startswith("Error: r.msgpack: ") and "results could not be written" in line
    assert "(File too large); it holds the others" in line and "Traceback" not in run.stderr
    lost = int(line.split(": ")[2].split(" ")[0].replace(",", ""))
    kept = list(ArchiveReader([tmp_path / "r.msgpack"]))
    assert lost > 0 and len(kept) + lost == 300
