"""``replay --retries policy``: a client's retries against an overloaded simulator.

The simulator runs two sequences with a queue of two, so a burst gets 429s with
``Retry-After: 1``; the policy retries each after that second, at most
``--max-attempts`` times, each attempt a result of its own linked to the one it
retried. ``--retries off`` sends each request once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tailreplay.http.retry_after import retry_after_s
from tailreplay.replayer.retry import RetryPolicy
from tailreplay.replayer.transport import Outcome
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9
SMALL = ["--sim-arg=--max-num-seqs=2", "--sim-arg=--queue-limit=2"]


def _burst(path: Path, n: int = 40) -> Path:
    maps = [{"start_ns": T0 + i * 10**7, "trace_id": bytes([1 + i]) * 16,
             "span_id": bytes([2]) * 8, "method": "POST", "path": "/v1/chat/completions",
             "model": "m", "stream": True, "input_tokens": 100, "output_tokens": 30}
            for i in range(n)]  # fmt: skip
    return write_plain(path, maps)


def _replay(archive: Path, out: Path, *extra: str, fail_fast: str = "0") -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", str(archive), "--out", str(out),
         "--no-preflight", "--fail-fast", fail_fast, *SMALL, *extra],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_policy_retries_429s_after_retry_after_up_to_max_attempts(tmp_path: Path) -> None:
    archive = _burst(tmp_path / "a.msgpack")
    stdout = _replay(archive, tmp_path / "off.msgpack", "--retries", "off")
    off = list(ArchiveReader([tmp_path / "off.msgpack"]))
    assert len(off) == 40 and all(r.attempt is None for r in off)
    assert sum(r.status == 429 for r in off) > 0  # the target was overloaded
    assert "attempts per request" not in stdout

    stdout = _replay(archive, tmp_path / "p.msgpack", "--retries", "policy", "--max-attempts", "3")
    results = list(ArchiveReader([tmp_path / "p.msgpack"]))
    firsts = [r for r in results if r.attempt == 1]
    assert len(firsts) == 40
    per_request = len(results) / len(firsts)
    assert 1 < per_request <= 3
    assert f"{per_request:.2f} attempts per request" in stdout
    # Requests and attempts named apart: 40 requests, each counted once.
    assert f"requests 40 ({len(results)} attempts)  sent {len(results)}" in stdout
    by_span = {r.span_id: r for r in results}
    for r in results:
        if r.attempt == 1:
            assert r.retry_of is None
            continue
        earlier = by_span[r.retry_of]
        assert earlier.attempt == r.attempt - 1 and earlier.status == 429
        assert r.trace_id == earlier.trace_id  # one trace per logical request
        assert r.attempt <= 3
        # Sent after the Retry-After second the 429 asked for.
        waited_s = (r.sent_ns - (earlier.sent_ns + earlier.duration_ns)) / 1e9
        assert 0.95 <= waited_s <= 1.5, waited_s


def test_fail_fast_judges_a_request_by_its_last_attempt(tmp_path: Path) -> None:
    # The default --fail-fast 20: the burst's first twenty results are 429s that the
    # policy retries; the run must not stop on them.
    archive = _burst(tmp_path / "a.msgpack")
    stdout = _replay(archive, tmp_path / "p.msgpack", "--retries", "policy", fail_fast="20")
    assert "attempts per request" in stdout


def test_the_report_shows_the_retry_amplification(tmp_path: Path) -> None:
    archive = _burst(tmp_path / "a.msgpack")
    _replay(archive, tmp_path / "p.msgpack", "--retries", "policy", "--max-attempts", "3")
    results = list(ArchiveReader([tmp_path / "p.msgpack"]))
    retries = sum((r.attempt or 1) > 1 for r in results)
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "report", str(tmp_path / "p.msgpack"),
         "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    block = json.loads((tmp_path / "r.json").read_text())["retries"]
    assert block["recorded"] is None  # the burst was recorded without retries
    mine = block["replayed"]
    assert mine["first_attempts"] == 40 and mine["retries"] == retries > 0
    assert mine["attempts_per_request"] == pytest.approx((40 + retries) / 40)
    assert sum(f + r for _, f, r in mine["by_time"]) == len(results)
    assert "| replayed | all | 40 |" in (tmp_path / "r.md").read_text()


def test_the_policy_retries_what_a_client_would() -> None:
    policy = RetryPolicy(max_attempts=3, seed=1)
    assert policy.delay_s(Outcome(status=429, retry_after_s=2.0), 1) == 2.0
    assert policy.delay_s(Outcome(status=503, retry_after_s=600.0), 1) == 30.0  # capped
    assert policy.delay_s(Outcome(status=429, retry_after_s=2.0), 3) is None  # third attempt
    for outcome in (Outcome(status=500), Outcome(error="timeout"), Outcome(error="reset")):
        wait = policy.delay_s(outcome, 2)
        assert wait is not None and 0 <= wait <= 1.0  # jitter within base * 2^(2 - 1)
    for outcome in (Outcome(status=200), Outcome(status=400), Outcome(error="cancelled")):
        assert policy.delay_s(outcome, 1) is None
    assert retry_after_s("3") == 3.0 and retry_after_s("-1") is None
    assert retry_after_s("\u00b2") is None  # a Unicode digit: str.isdigit says yes, float no
