"""``replay --users N --think T``: a closed loop against the built-in simulator.

Each of N users sends a request, waits for its answer and the think time, and sends
the next, so the target sets the rate: throughput is N / (mean latency + think)
(Little's law), and no more than N requests are ever in flight.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tailreplay.replayer.schedule import Planned
from tailreplay.replayer.sessions import SESSION_GAP_S, SessionFeeder
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9
USERS = 6
THINK_S = 0.2


def _archive(path: Path, n: int) -> Path:
    # Alike requests (the latency varies little, so the users finish together), recorded
    # at 1,000 req/s: an open loop would send them all in a fraction of a second.
    maps = [{"start_ns": T0 + i * 10**6, "trace_id": bytes([1 + i % 250]) * 16,
             "span_id": bytes([2]) * 8, "method": "POST", "path": "/v1/chat/completions",
             "model": "m", "stream": True, "input_tokens": 100, "output_tokens": 40}
            for i in range(n)]  # fmt: skip
    return write_plain(path, maps)


def _replay(archive: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", str(archive), "--out", str(out),
         "--no-preflight", *extra],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_throughput_is_users_over_latency_plus_think(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "a.msgpack", 30 * USERS)
    out = tmp_path / "r.msgpack"
    done = _replay(archive, out, "--users", str(USERS), "--think", f"{THINK_S * 1000:g}ms")
    assert done.returncode == 0, done.stderr
    assert f"closed loop: {USERS} users, think {THINK_S:g} s" in done.stderr
    records = list(ArchiveReader([out]))
    assert len(records) == 30 * USERS and all(r.status == 200 for r in records)
    sent = np.array([r.sent_ns for r in records], dtype=np.int64)
    ended = sent + np.array([r.duration_ns for r in records], dtype=np.int64)
    # Never more than N in flight: each user's next request leaves after its answer.
    events = np.concatenate([np.stack([sent, np.ones_like(sent)], 1),
                             np.stack([ended, -np.ones_like(ended)], 1)])  # fmt: skip
    events = events[np.lexsort((events[:, 1], events[:, 0]))]  # ends before starts on ties
    assert np.cumsum(events[:, 1]).max() <= USERS
    # Little's law: the rate the target allowed is what N users cycling through
    # latency + think can send.
    measured = len(records) / ((ended.max() - sent.min()) / 1e9)
    mean_latency_s = float((ended - sent).mean()) / 1e9
    predicted = USERS / (mean_latency_s + THINK_S)
    assert abs(measured / predicted - 1) <= 0.05, (measured, predicted, mean_latency_s)


def test_a_closed_loop_refuses_options_of_the_open_one(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "a.msgpack", 10)
    for extra in (["--speed", "2x"], ["--amplify", "2"], ["--dry-run"]):
        done = _replay(archive, tmp_path / "r.msgpack", "--users", "2", *extra)
        assert done.returncode == 2, done.stderr
        assert "--users: the users set the rate" in done.stderr
        assert "Traceback" not in done.stderr


def test_users_step_up_and_each_step_is_a_phase(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "a.msgpack", 400)
    out = tmp_path / "r.msgpack"
    done = _replay(archive, out, "--users", "2,6@3s", "--think", "100ms", "--duration", "6s",
                   "--json", str(tmp_path / "s.json"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = list(ArchiveReader([out]))
    by_phase: dict[str | None, list] = {}
    for r in records:
        by_phase.setdefault(r.phase, []).append(r)
    assert set(by_phase) == {"2 users", "6 users"}
    t0 = min(r.sent_ns for r in records)
    for phase, users, begin, end in (("2 users", 2, 0, 3), ("6 users", 6, 3, 6)):
        rs = by_phase[phase]
        sent = np.array([r.sent_ns for r in rs], dtype=np.int64)
        ended = sent + np.array([r.duration_ns for r in rs], dtype=np.int64)
        assert begin - 0.05 <= (sent.min() - t0) / 1e9 and (sent.max() - t0) / 1e9 <= end + 0.3
        events = np.concatenate([np.stack([sent, np.ones_like(sent)], 1),
                                 np.stack([ended, -np.ones_like(ended)], 1)])  # fmt: skip
        events = events[np.lexsort((events[:, 1], events[:, 0]))]
        assert np.cumsum(events[:, 1]).max() <= users
    # Three times the users, about three times the requests in the same 3 s.
    assert len(by_phase["6 users"]) > 2 * len(by_phase["2 users"])
    # The report's closed-loop table: per step and input length, users and throughput.
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "report", str(out), "--replay-only",
         "--json", str(report)], capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "closed loop: by users and input length" in done.stdout
    rows = {r["users"]: r for r in json.loads(report.read_text())["closed_loop"]}
    assert set(rows) == {"2 users", "6 users"}  # one input bucket: 100 tokens each
    for users, row in rows.items():
        assert row["seconds"] == 3.0 and row["range"] == "50-256"
        assert row["replayed"]["requests"] == len(by_phase[users])
        assert row["replayed"]["throughput_rps"] == len(by_phase[users]) / 3.0


def test_a_user_replays_a_session_in_order_with_its_recorded_think_times(
    tmp_path: Path,
) -> None:
    # Two interleaved sessions of four requests, each recorded 500 ms long and sent
    # 500 ms after the one before it ended (1 s apart).
    maps = [{"start_ns": T0 + k * 10**9 + s * 10**8, "trace_id": bytes([1 + 4 * s + k]) * 16,
             "span_id": bytes([2]) * 8, "method": "POST", "path": "/v1/chat/completions",
             "model": "m", "stream": True, "input_tokens": 50, "output_tokens": 4,
             "duration_ns": 500 * 10**6, "session": f"s{s}"}
            for k in range(4) for s in range(2)]  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", maps)
    out = tmp_path / "r.msgpack"
    done = _replay(archive, out, "--users", "1", "--think", "recorded")
    assert done.returncode == 0, done.stderr
    assert "think as recorded" in done.stderr
    records = sorted(ArchiveReader([out]), key=lambda r: r.sent_ns)
    # One user: the first session whole, then the second, each in recorded order.
    assert [r.orig_trace_id[0] for r in records] == [1, 2, 3, 4, 5, 6, 7, 8]
    for a, b in itertools.pairwise(records):
        if a.session == b.session:
            think_s = (b.sent_ns - (a.sent_ns + a.duration_ns)) / 1e9
            assert 0.49 <= think_s <= 0.6, think_s
        else:  # a new session starts at once
            assert (b.sent_ns - (a.sent_ns + a.duration_ns)) / 1e9 < 0.1


def _planned(session: str | None, start_s: float, n: int) -> Planned:
    return Planned(start_s, Record(start_ns=T0 + round(start_s * 1e9), session=session,
                                   trace_id=bytes([n]) * 16), 0, False, None)  # fmt: skip


def test_a_session_idle_past_the_gap_is_a_new_one_and_a_left_session_is_taken_on() -> None:
    gap = SESSION_GAP_S
    items = [_planned("a", 0, 1), _planned("a", 1, 2), _planned("b", 2, 3),
             _planned("a", gap + 10, 4), _planned("b", gap + 11, 5)]  # fmt: skip
    feeder = SessionFeeder(iter(items))
    first = feeder.claim()
    assert first is not None and first[1].record.trace_id[0] == 1
    key = first[0]
    second = feeder.next(key)
    assert second is not None and second.record.trace_id[0] == 2
    # "a" is idle for longer than the gap: its record at gap + 10 s is a new session.
    assert feeder.next(key) is None
    # The user leaves "b" after its first record; the next claim takes it on.
    b = feeder.claim()
    assert b is not None and b[1].record.trace_id[0] == 3
    feeder.give_back(b[0], b[1])
    again = feeder.claim()
    assert again is not None and again[0] == b[0] and again[1].record.trace_id[0] == 3
    late_a = feeder.claim()
    assert late_a is not None and late_a[1].record.trace_id[0] == 4


def test_duration_ends_a_think_and_bad_user_counts_are_usage_errors(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "a.msgpack", 20)
    began = time.monotonic()
    done = _replay(archive, tmp_path / "r.msgpack", "--users", "2", "--think", "1h",
                   "--duration", "2s")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 30  # not an hour: the duration ends the think
    assert "--duration 2s: sending stopped there; 18 of 20 never sent" in done.stdout
    for bad in ("0", "abc", "1,2", "10001", "1,2@0s"):
        done = _replay(archive, tmp_path / "r.msgpack", "--users", bad)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (bad, done.stderr)
        assert "--users" in done.stderr
