"""The report of a sharded replay's merged results: a table of the shards, a line naming
a shard that started late, and a client verdict that does not blame the machine for a
late start (docs/report.md, "Sharded replays")."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tailreplay.cli import cli
from tailreplay.sim.launcher import sim_process
from tests.helpers import HEADER, chat_archive, write_plain

T0 = 1_700_000_000 * 10**9
# Generous, so the punctual shard is measured on a busy test machine; a late start's
# seconds of lag are still far past it.
LAG_LIMIT = "250ms"


def _shard(archive: Path, out: Path, start_at_ns: int, shard: str, sim: str) -> list[str]:
    return [sys.executable, "-m", "tailreplay", "replay", str(archive), "--target", sim,
            "--start-at", str(start_at_ns / 1e9), "--shard", shard, "--lag-limit", LAG_LIMIT,
            "--out", str(out)]  # fmt: skip


def _report(tmp_path: Path, *files: Path, args: tuple[str, ...] = ()) -> tuple[Result, Any]:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["report", *map(str, files), "--json", str(out), *args])
    return result, json.loads(out.read_text()) if out.exists() else None


def _replay_two_shards(tmp_path: Path, late_s: float) -> list[Path]:
    """Shards 0/2 and 1/2 of 300 requests over 6 s with one --start-at 4 s ahead against
    the simulator; shard 1 is started ``late_s`` after it (plus its own start-up)."""
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 300, gap_ms=20, seed=11)
    outs = [tmp_path / "shard-0.msgpack", tmp_path / "shard-1.msgpack"]
    with sim_process(["--profile", "fast", "--max-num-seqs", "512"]) as sim:
        start_at = time.time_ns() + 4 * 10**9  # both started by then, on a busy machine too
        first = subprocess.Popen(
            _shard(archive, outs[0], start_at, "0/2", sim),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        if late_s:
            time.sleep(max(0.0, (start_at - time.time_ns()) / 1e9 + late_s))
        second = subprocess.run(_shard(archive, outs[1], start_at, "1/2", sim),
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr
    return outs


def test_a_shard_started_late_is_named_in_the_report(tmp_path: Path) -> None:
    outs = _replay_two_shards(tmp_path, late_s=2.0)
    result, report = _report(tmp_path, *outs)
    assert result.exit_code == 0, result.stderr
    shards = report["shards"]
    late, punctual = shards["rows"][1], shards["rows"][0]
    assert [r["label"] for r in shards["rows"]] == ["0/2", "1/2"] and shards["late"] == ["1/2"]
    assert late["first_lag_ms"] > 2000 and late["late"] and late["catch_up"] > 0
    assert punctual["first_lag_ms"] < 1000 and not punctual["late"]
    assert late["requests"] + punctual["requests"] == 300
    line = f"warning: shard 1/2 started {late['first_lag_ms'] / 1e3:.1f} s behind --start-at: "
    assert line + "its first requests carry that delay as lag" in result.stderr
    assert "shards: dispatch lag (ms)" in result.stdout
    (row,) = [x for x in result.stdout.splitlines() if x.strip("│ ").startswith("1/2")]
    assert "LATE" in row
    # The merged report's settings name no one shard of the two.
    assert "shard" not in report["replay"]
    # Over every request, the late start is past the limit. Whom the report holds to
    # it depends on when the punctual rest left: the perf test below, and the synthetic
    # shards of the tests after it.
    assert shards["lag_p99_ms"] > report["client"]["lag_limit_ms"] == 250


@pytest.mark.perf
def test_a_shard_started_late_is_not_held_against_a_punctual_client(tmp_path: Path) -> None:
    outs = _replay_two_shards(tmp_path, late_s=2.0)
    result, report = _report(tmp_path, *outs)
    assert result.exit_code == 0, result.stderr
    shards = report["shards"]
    late = shards["rows"][1]
    # The rest of the run's lag is within the limit (250 ms P99 besides the catch-up)...
    assert late["lag_p99_after_first_s_ms"] < 250
    # ...so the late start, past it, is not held against the client.
    assert not report["client"]["client_bound"] and shards["lag_cause"] == "late start"
    assert "CLIENT-BOUND" not in result.stdout and "bottleneck" not in result.stderr
    assert "comes from the late start of shard 1/2" in result.stderr


def test_shards_started_together_show_no_late_start(tmp_path: Path) -> None:
    outs = _replay_two_shards(tmp_path, late_s=0.0)
    result, report = _report(tmp_path, *outs)
    assert result.exit_code == 0, result.stderr
    rows = report["shards"]["rows"]
    assert [r["label"] for r in rows] == ["0/2", "1/2"] and report["shards"]["late"] == []
    assert all(r["first_lag_ms"] < 500 and r["catch_up"] == 0 for r in rows), rows
    assert "behind --start-at" not in result.stderr
    assert " LATE" not in result.stdout and "s late" not in result.stdout.splitlines()[0]
    assert "shards: dispatch lag (ms)" in result.stdout


# Result archives written plainly, for the rule's arithmetic without a clock.


def _results(
    folder: Path, *, late_s: float, slow_ms: float = 0.0, catches_up: bool = True
) -> list[Path]:
    """Two shards' results, 400 requests 20 ms apart; shard 1 started ``late_s`` late
    and sent its backlog 0.1 ms apart. ``slow_ms``: every 20th request of both went out
    that late (a busy client); ``catches_up=False``: shard 1 never got back on time."""
    rng = random.Random(3)
    paths = []
    for shard in (0, 1):
        due = [T0 + i * 20 * 10**6 for i in range(shard, 400, 2)]
        first = due[0] + round(late_s * 1e9 if shard == 1 else 10**5)
        maps, free = [], first
        for k, d in enumerate(due):
            sent = max(d + 10**5, free)
            free = sent + (10**5 if catches_up else 3 * 10**7)
            sent += round(slow_ms * 1e6) if k % 20 == 19 else 0
            maps.append({
                "start_ns": sent, "duration_ns": 10**8, "status": 200, "intended_ns": d,
                "sent_ns": sent, "lag_ns": sent - d, "shard": shard,
                "trace_id": rng.randbytes(16), "span_id": rng.randbytes(8),
                "orig_trace_id": rng.randbytes(16), "orig_span_id": rng.randbytes(8),
            })  # fmt: skip
        header = {**HEADER, "source": "replay", "shard": [shard, 2], "lag_limit_ms": 5.0}
        paths.append(write_plain(folder / f"shard-{shard}.msgpack", maps, header))
    return paths


def test_the_catch_up_is_the_backlog_a_late_start_left(tmp_path: Path) -> None:
    result, report = _report(tmp_path, *_results(tmp_path, late_s=3.01))
    assert result.exit_code == 0, result.stderr
    late = report["shards"]["rows"][1]
    # 3.01 s at one request per 40 ms: 76 were due before its first send, and the burst
    # (0.1 ms a send) is back on schedule with the next.
    assert late["catch_up"] == 76 and report["shards"]["catch_up"] == 76
    assert late["first_lag_ms"] == pytest.approx(3010, abs=0.2)
    assert report["client"]["lag_p99_ms"] < 1 and not report["client"]["client_bound"]
    assert "; shard 1/2 started 3.0 s late" in result.stdout.splitlines()[0]
    # The late start, past the limit over every request, is not held against the client.
    assert report["shards"]["lag_p99_ms"] > report["client"]["lag_limit_ms"]
    assert report["shards"]["lag_cause"] == "late start"
    assert "CLIENT-BOUND" not in result.stdout and "bottleneck" not in result.stderr
    assert "comes from the late start of shard 1/2" in result.stderr


@pytest.mark.parametrize(
    ("slow_ms", "catches_up", "why"),
    [
        (50.0, True, "the late start of shard 1/2 does not explain the dispatch lag"),
        # Never back on time: only its first 3 s of sending are a late start's.
        (0.0, False, "the late start of shard 1/2 does not explain the dispatch lag"),
    ],
)
def test_a_busy_client_that_also_started_late_is_still_client_bound(
    tmp_path: Path, slow_ms: float, catches_up: bool, why: str
) -> None:
    files = _results(tmp_path, late_s=3.0, slow_ms=slow_ms, catches_up=catches_up)
    result, report = _report(tmp_path, *files, args=("--slo", "latency:p99<=60s"))
    assert result.exit_code == 4  # not judged
    assert report["client"]["client_bound"] and report["shards"]["lag_cause"] == "client"
    assert "CLIENT-BOUND" in result.stdout and "SLO NOT JUDGED" in result.stdout
    assert why in result.stderr and "warning: the client was the bottleneck" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: SLO not judged")


def _result(path: Path, shard: list[int], archive: Path, **header: Any) -> Path:
    """A shard's result archive: 20 answered requests, as `replay --shard` writes them."""
    maps = [{"start_ns": T0 + i * 10**7, "status": 200, "duration_ns": 10**7, "lag_ns": 1000,
             "sent_ns": T0 + i * 10**7, "intended_ns": T0 + i * 10**7, "shard": shard[0]}
            for i in range(20)]  # fmt: skip
    settings = {"source": "replay", "speed": "2x", "tail_stretch": 1.8, "tail_quantile": 0.99,
                "amplify": 1.0, "shard": shard, "archives": [str(archive)],
                "start_at_ns": T0, **header}  # fmt: skip
    return write_plain(path, maps, {**HEADER, **settings})


def test_results_of_two_runs_are_refused_not_reported_as_one(tmp_path: Path) -> None:
    """A rerun under the same name leaves shard files of two runs side by side: read
    together they would be one report of neither, so report refuses them (exit 2,
    one line naming the setting that differs); one run's shards report as one."""
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 40, gap_ms=10, seed=3)
    a = _result(tmp_path / "a0.msgpack", [0, 2], archive)
    b = _result(tmp_path / "a1.msgpack", [1, 2], archive)
    result, report = _report(tmp_path, a, b)
    assert result.exit_code == 0, result.output
    assert report["shards"]["count"] == 2
    others = {
        "speed": _result(tmp_path / "s.msgpack", [1, 2], archive, speed="1x"),
        "shards": _result(tmp_path / "n.msgpack", [1, 4], archive),
        "start_at_ns": _result(tmp_path / "t.msgpack", [1, 2], archive, start_at_ns=T0 + 1),
    }
    for setting, other in others.items():
        result, _ = _report(tmp_path, a, other)
        assert result.exit_code == 2, (setting, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and f"are results of different replays ({setting} " in lines[0]
    again = _result(tmp_path / "again.msgpack", [0, 2], archive)
    result, _ = _report(tmp_path, a, b, again)
    assert result.exit_code == 2 and "are both shard 0/2" in result.stderr
    # The recording given among the results: refused, not counted as replayed.
    result, _ = _report(tmp_path, a, b, archive)
    assert result.exit_code == 2 and f"{archive} is not a replay's results" in result.stderr
    # The same archives in another order (a shell glob's) are one run's.
    other = tmp_path / "b.msgpack"
    chat_archive(other, 10, gap_ms=10, seed=4)
    c = _result(tmp_path / "c0.msgpack", [0, 2], archive, archives=[str(archive), str(other)])
    d = _result(tmp_path / "c1.msgpack", [1, 2], archive, archives=[str(other), str(archive)])
    result, _ = _report(tmp_path, c, d)
    assert result.exit_code == 0, result.output


def test_a_shard_left_out_is_named_not_reported_as_the_whole_run(tmp_path: Path) -> None:
    """Three shards' results of four (a glob that missed one, a shard still running):
    the report says which is missing, in its warnings and on stderr."""
    rng = random.Random(5)
    paths = []
    for shard in (0, 1, 3):
        maps = [{"start_ns": T0 + i * 10**7, "duration_ns": 10**8, "status": 200,
                 "intended_ns": T0 + i * 10**7, "sent_ns": T0 + i * 10**7, "lag_ns": 10**4,
                 "shard": shard, "trace_id": rng.randbytes(16), "span_id": rng.randbytes(8)}
                for i in range(shard, 200, 4)]  # fmt: skip
        header = {**HEADER, "source": "replay", "shard": [shard, 4]}
        paths.append(write_plain(tmp_path / f"shard-{shard}.msgpack", maps, header))
    result, report = _report(tmp_path, *paths)
    assert result.exit_code == 0, result.stderr
    line = ("shard 2/4 missing: the results given are 3 of the run's 4 shards, so this "
            "report covers part of its load")  # fmt: skip
    assert report["warnings"][0] == line and f"warning: {line}" in result.stderr
    two, _ = _report(tmp_path, *paths[:2])
    assert "shards 2/4, 3/4 missing" in two.stderr
    (tmp_path / "all").mkdir()
    every, _ = _report(tmp_path / "all", *_results(tmp_path / "all", late_s=0.0))
    assert every.exit_code == 0 and "missing" not in every.stderr
