"""A replay says what it will send before it starts, and how far along it is while
it runs: the header counts the requests ``--duration`` leaves in (not the archive's),
and each progress line has the total, the share done and the time left."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tailreplay.sim.launcher import sim_process
from tests.helpers import REPO

PEAK = REPO / "traces/peak.msgpack"  # 2,382 requests over 300 s


def test_the_header_counts_what_duration_leaves_and_progress_has_a_total(
    tmp_path: Path,
) -> None:
    summary = tmp_path / "s.json"
    with sim_process(["--profile", "fast"]) as url:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tailreplay",
                "replay",
                "--target",
                url,
                "--duration",
                "5s",
                "--json",
                str(summary),
                "-o",
                str(tmp_path / "r.msgpack"),
                str(PEAK),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    data = json.loads(summary.read_text())
    # One dispatch lag: the summary's P99 is the client verdict's.
    assert data["lag_ms"]["p99"] == pytest.approx(data["client"]["lag_p99_ms"], rel=1e-9)
    header = next(line for line in done.stderr.splitlines() if line.startswith("replaying "))
    # As many as were sent: what --duration left in, not the archive's 2,382.
    assert header.startswith(f"replaying {data['sent']:,} requests of 2,382 (--duration 5s)")
    progress = [line for line in done.stderr.splitlines() if " due " in line]
    assert progress, done.stderr
    pattern = re.compile(r"due [\d,]+ of " + f"{data['sent']:,}" + r" \(\d+%\) .* (\d+)s left$")
    assert all(pattern.search(line) for line in progress), progress
    lefts = [int(pattern.search(line).group(1)) for line in progress]  # type: ignore[union-attr]
    assert lefts == sorted(lefts, reverse=True) and lefts[0] <= 5


def test_an_error_that_rounds_to_zero_is_not_negative() -> None:
    from tailreplay.replayer.replay_summary import ReplaySummary, TailSummary
    from tailreplay.replayer.summary import summary_lines

    tail = TailSummary(count=0, factor=1.8, quantile=0.99, by=None, capped=0, context=None)
    summary = ReplaySummary(
        requests=10,
        attempts=10,
        sent=10,
        completed=10,
        errors={},
        error_messages={},
        dropped=0,
        duration_s=1.0,
        throughput_rps=10.0,
        latency_ms=None,
        latency_from_due_ms=None,
        ttft_ms=None,
        ttft_content_ms=None,
        tpot_ms=None,
        lag_ms=None,
        retries=0,
        tail=tail,
        input_tokens_error=-1e-7,
    )
    lines = summary_lines(summary)
    assert "input tokens vs recorded: 0.00% (as the target counts them)" in lines
    summary.input_tokens_error = -0.0123
    assert "input tokens vs recorded: -1.23% (as the target counts them)" in summary_lines(summary)


def test_once_stopping_the_line_counts_no_time_left() -> None:
    # Ctrl-C: nothing more will be sent, so "4m58s left" would be a count of nothing.
    import asyncio
    import time
    from array import array
    from types import SimpleNamespace

    from tailreplay.replayer.progress import status_line

    stats = SimpleNamespace(due=10, sent=10, completed=4, in_flight=6, errors=0, dropped=0)
    d = SimpleNamespace(stats=stats, lags_ns=array("q", [10**6]), stopping=asyncio.Event())
    line = status_line(d, time.monotonic(), total=100, length_s=300.0)  # type: ignore[arg-type]
    assert line().endswith(" left") and "stopping" not in line()
    d.stopping.set()
    assert line().endswith("  stopping") and "left" not in line()
