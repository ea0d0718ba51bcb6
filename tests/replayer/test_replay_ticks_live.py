"""Live replays of a trace logged in 3 s ticks, with 100k-token synthetic prompts.

The target is ``tests/instant_target.py`` in its own process: it reads each body and
answers at once. The subject here is the replayer's timing, so the target must not
be the bottleneck; the built-in simulator would spend seconds on every 100k-token
prefill, pile requests up in flight and take the replayer's CPU on a small machine.

The replay runs as the command does, in its own process, with ``--start-at`` so
the result records' ``intended_ns`` can be placed on the recorded ticks exactly.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import UNBOUND, assert_client_verdict_consistent, write_plain
from tests.instant_target import instant_target

TICK = 3 * 10**9
LONG = 100_000
LAG_P99_BOUND_MS = 25.0
"""Generous: the replayer's own lag P99 here is ~2 ms (docs/benchmarks.md,
bench/ticks.py); sent in bursts with prompts built when due it was 209-390 ms."""


def _tick_archive(path: Path, rate: float = 4.0, span_s: float = 24.0) -> list[dict[str, Any]]:
    """Poisson arrivals at ``rate``/s floored to 3 s ticks; a third of the prompts
    100k tokens, the rest 200; no bodies (so prompts are synthetic)."""
    rng = random.Random(8)
    t, maps = 0.0, []
    first_tick = 1_700_000_001 * 10**9  # a multiple of 3 s
    while (t := t + rng.expovariate(rate)) < span_s:
        maps.append(
            {
                "start_ns": first_tick + int(t * 1e9) // TICK * TICK,
                "trace_id": rng.randbytes(16), "span_id": rng.randbytes(8), "method": "POST",
                "path": "/v1/chat/completions", "model": "m", "stream": False,
                "input_tokens": LONG if rng.random() < 1 / 3 else 200, "output_tokens": 4,
                "duration_ns": rng.randint(10**8, 10**9),
            }
        )  # fmt: skip
    write_plain(path, maps)
    return maps


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with instant_target() as url:
        yield url


def _replay(
    target: str, archive: Path, tmp: Path, *args: str
) -> tuple[list, dict, subprocess.CompletedProcess[str], int]:
    """Run the command; (result records, JSON summary, the process, --start-at in unix
    ns)."""
    start_at = int(time.time()) + 6  # imports and planning fit in well under this
    out, summary = tmp / "r.msgpack", tmp / "s.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", "--target", target, "--out", str(out),
         "--json", str(summary), "--start-at", str(start_at), *args, str(archive)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = list(ArchiveReader([out]))
    return results, json.loads(summary.read_text()), proc, start_at * 10**9


def test_spread_ticks_keep_each_ticks_count_and_spread_it(tmp_path: Path, target: str) -> None:
    maps = _tick_archive(tmp_path / "ticks.msgpack")
    first = maps[0]["start_ns"]
    results, summary, proc, t0 = _replay(target, tmp_path / "ticks.msgpack", tmp_path, *UNBOUND)
    err = proc.stderr
    assert err.splitlines()[0].startswith("timestamps are quantised to 3 s ticks (")
    assert "spreading each tick's requests over the tick" in err.splitlines()[0]
    assert len(results) == len(maps) and all(r.status == 200 for r in results)
    # Per tick, as many requests as the recording, by the results' own intended times.
    recorded = Counter((m["start_ns"] - first) // TICK for m in maps)
    assert Counter((r.intended_ns - t0) // TICK for r in results) == recorded
    # Each request stays in its own recorded tick.
    start_of = {m["trace_id"]: m["start_ns"] - first for m in maps}
    for r in results:
        assert 0 <= r.intended_ns - t0 - start_of[r.orig_trace_id] < TICK
    # No two requests of a tick are due at the same instant; they spread over the tick.
    due = [r.intended_ns for r in results]
    assert len(set(due)) == len(due)
    assert float(np.median(_spans_s(results, t0, "intended_ns"))) > 1.5
    # When they left is the perf test below; the summary's verdict agrees with its lag.
    assert_client_verdict_consistent(summary, proc.stdout)


def _spans_s(results: list, t0: int, field: str) -> list[float]:
    """Per recorded tick of 4 requests or more, the seconds between its first and its
    last request's ``field`` (intended_ns: due; sent_ns: left)."""
    by_tick: dict[int, list[int]] = defaultdict(list)
    for r in results:
        by_tick[(r.intended_ns - t0) // TICK].append(getattr(r, field))
    return [(max(s) - min(s)) / 1e9 for s in by_tick.values() if len(s) >= 4]


@pytest.mark.perf
def test_spread_ticks_of_100k_token_prompts_are_sent_on_time(tmp_path: Path, target: str) -> None:
    _tick_archive(tmp_path / "ticks.msgpack")
    results, summary, _, t0 = _replay(target, tmp_path / "ticks.msgpack", tmp_path)
    # The replay's own lag measure, with a third of the prompts 100k tokens long...
    assert summary["lag_ms"]["p99"] <= LAG_P99_BOUND_MS, summary["lag_ms"]
    # ...and each tick's requests left spread over it, never two at the same instant.
    sent = [r.sent_ns for r in results]
    assert len(set(sent)) == len(sent)
    assert float(np.median(_spans_s(results, t0, "sent_ns"))) > 1.5


def test_no_spread_ticks_sends_each_tick_as_one_burst(tmp_path: Path, target: str) -> None:
    maps = _tick_archive(tmp_path / "ticks.msgpack", rate=8, span_s=15)
    first = maps[0]["start_ns"]
    results, _, proc, t0 = _replay(
        target, tmp_path / "ticks.msgpack", tmp_path, "--no-spread-ticks", "--speed", "3x"
    )
    err = proc.stderr
    assert err.splitlines()[0].endswith("each tick's requests go out together (--no-spread-ticks)")
    assert len(results) == len(maps)
    # Every request of a tick is due at the tick's start (3x: one tick a second)...
    for r in results:
        recorded = next(m["start_ns"] for m in maps if m["trace_id"] == r.orig_trace_id)
        assert r.intended_ns - t0 == (recorded - first) // 3
    # ...and leaves with the rest of its burst, far closer together than a spread would.
    by_tick: dict[int, list[int]] = defaultdict(list)
    for r in results:
        by_tick[r.intended_ns].append(r.sent_ns)
    assert max(len(s) for s in by_tick.values()) >= 10
    assert all(max(s) - min(s) < 0.3e9 for s in by_tick.values())
