"""Every dialect's capture and replay measure alike: latency and TTFT, P50 and P99.

The shipped peak's first 20 s are sent through ``tailreplay proxy`` into simulator A,
each request in turn as a chat, completions, Responses, embeddings or Anthropic
Messages request (the replayer builds each body from the recorded lengths). The
capture is replayed at 1x, without tail stretch, into simulator B, identical to A:
both answer the same requests alike, so the report's row for each route holds the
same figures on both sides, up to the machine's noise. ``bench/fidelity.py
--dialect all`` measures the real agreement (docs/benchmarks.md: within 5% on a
quiet machine); the margins here leave a busy 2-core machine room.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tailreplay.dialects import DIALECTS
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import REPO, UNBOUND
from tests.proxy_helpers import start_proxy_process

pytestmark = pytest.mark.perf

PEAK = REPO / "traces" / "peak.msgpack"
WINDOW_S = 20
SIM = ["--profile", "fast", "--seed", "1"]
# (figure, quantile, relative margin, absolute margin in ms): a figure agrees when
# the replay is within either of the capture.
MARGINS = [
    ("latency", "p50", 0.15, 20.0),
    ("latency", "p99", 0.25, 50.0),
    ("ttft", "p50", 0.25, 8.0),
    ("ttft", "p99", 0.35, 15.0),
]


def _mixed(path: Path) -> int:
    """The peak's window, request i sent as dialect i mod 5."""
    maps: list[dict[str, Any]] = []
    for i, m in enumerate(ArchiveReader([PEAK], order="file").iter_maps()):
        if maps and m["start_ns"] - maps[0]["start_ns"] > WINDOW_S * 10**9:
            break
        dialect = DIALECTS[i % len(DIALECTS)]
        m["path"] = dialect.routes[0]
        m["stream"] = bool(dialect.stream_ends) and m.get("stream", True)
        maps.append(m)
    return write_archive(path, make_header("peak, every dialect", ordered=True), maps)


def _tailreplay(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tailreplay", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_every_dialects_capture_and_replay_agree_at_p50_and_p99(tmp_path: Path) -> None:
    sent = _mixed(tmp_path / "mixed.msgpack")
    with sim_process(SIM) as production:
        proc, url, _ = start_proxy_process(production, tmp_path / "cap")
        try:
            drive = _tailreplay(
                "replay", tmp_path / "mixed.msgpack", "--target", url, "--out",
                tmp_path / "drive.msgpack", *UNBOUND,
            )  # fmt: skip
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    assert drive.returncode == 0, drive.stderr
    capture = sorted((tmp_path / "cap").glob("*.msgpack"))
    # A dialect has about 33 requests here, so its P99 is its slowest one: one request
    # held up by the shared machine (51 ms once, on a TTFT P99 of 77) is that figure.
    # A replay that misses is replayed once more, and the second must agree on every
    # figure: a dialect measured wrong misses both times.
    misses = _misses(capture, tmp_path / "first", sent)
    if misses:
        again = _misses(capture, tmp_path / "again", sent)
        assert not again, (misses, again)


def _misses(capture: list[Path], out: Path, sent: int) -> list[str]:
    """The capture replayed at 1x into a fresh simulator B: the figures of each route
    where the replay and the capture differ by more than ``MARGINS`` allow."""
    out.mkdir()
    with sim_process(SIM) as staging:
        replay = _tailreplay(
            "replay", *capture, "--target", staging, "--tail-stretch", "1", "--out",
            out / "replay.msgpack", *UNBOUND,
        )  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    report = out / "report.json"
    done = _tailreplay("report", out / "replay.msgpack", "--json", report)
    assert done.returncode == 0, done.stderr
    rows = {row["route"]: row for row in json.loads(report.read_text())["routes"]}
    assert set(rows) == {d.routes[0] for d in DIALECTS}
    assert sum(row["recorded"]["requests"] for row in rows.values()) == sent
    misses = []
    for route, row in rows.items():
        assert row["replayed"]["errors"] == 0 and row["recorded"]["errors"] == 0, route
        for figure, q, relative, absolute in MARGINS:
            if route == "/v1/embeddings" and figure == "ttft":
                continue  # no tokens out: no first token
            was = row["recorded"]["metrics"][figure][q]["value"]
            now = row["replayed"]["metrics"][figure][q]["value"]
            if abs(now - was) > max(relative * was, absolute):
                misses.append(f"{route} {figure} {q}: captured {was:.1f} ms, replayed {now:.1f}")
    return misses
