"""Memory bounded by bytes: re-ordering holds records up to a byte budget, not a time.

Past the budget the oldest records held go out early and a record that then comes
older than one already out is passed through late and counted; nothing is lost.
The budget is TAILREPLAY_READ_BUDGET (default 256 MiB).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.reorder import BUDGET_ENV
from tests.helpers import HEADER, run_measured

T0 = 1_700_000_000 * 10**9
CAPTURE = {**HEADER, "source": "proxy", "capture": {"timeout_s": 600}}


def _completion_ordered(n: int, seed: int = 3) -> list[dict[str, Any]]:
    """Records 1 ms apart lasting up to 50 ms, as a proxy writes them: by completion."""
    rng = random.Random(seed)
    maps = []
    for i in range(n):
        duration = rng.randint(0, 50 * 10**6)
        maps.append({"start_ns": T0 + i * 10**6, "duration_ns": duration, "status": 200,
                     "method": "POST", "path": "/v1/chat/completions", "input_tokens": i % 900,
                     "output_tokens": 7, "trace_id": rng.randbytes(16)})  # fmt: skip
    return sorted(maps, key=lambda m: m["start_ns"] + m["duration_ns"])


def _write(path: Path, maps: list[dict[str, Any]], header: dict[str, Any] = CAPTURE) -> Path:
    data = msgpack.packb(header) + b"".join(msgpack.packb(m) for m in maps)
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if path.suffix == ".zst" else data)
    return path


def _read(path: Path, budget: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], int, Any]:
    """Start times in reading order, the most bytes held at once, the reader."""
    monkeypatch.setenv(BUDGET_ENV, budget)
    reader = ArchiveReader([path])
    assert reader.reorder is not None
    starts, most = [], 0
    for m in reader.iter_maps():
        starts.append(m["start_ns"])
        most = max(most, reader.reorder.held)
    return starts, most, reader


def test_the_budget_bounds_the_window_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    maps = _completion_ordered(3000)
    path = _write(tmp_path / "a.msgpack", maps)
    want = sorted(m["start_ns"] for m in maps)

    # The whole window fits: exact start order, nothing late.
    starts, most, reader = _read(path, "64MiB", monkeypatch)
    assert starts == want and reader.late == 0 and reader.warnings() == []
    whole_window = most

    # 200 KiB holds ~150 of these records: more than the ~50 a record can be out of
    # order by, so the order is still exact, in a fraction of the memory.
    starts, most, reader = _read(path, "200KiB", monkeypatch)
    assert most <= 200 << 10 < whole_window
    assert starts == want and reader.late == 0

    # 8 KiB holds a handful: records go out before their time, the ones that then
    # come late are counted and named, and every record is still read once.
    starts, most, reader = _read(path, "8KiB", monkeypatch)
    assert most <= 8 << 10
    assert sorted(starts) == want and reader.late > 0
    assert reader.warnings() == [
        f"{reader.late} records were out of time order beyond the reorder window (the "
        f"records inside the window exceeded the read budget of 8 KiB; set {BUDGET_ENV}, "
        "e.g. =2GiB, to hold more)"
    ]


@pytest.mark.parametrize(("value", "message"), [("lots", "not a size"), ("0", "more than 0")])
def test_a_bad_budget_is_a_usage_error(tmp_path: Path, value: str, message: str) -> None:
    path = _write(tmp_path / "a.msgpack", _completion_ordered(10))
    out = tmp_path / "m.msgpack"
    result = CliRunner(env={BUDGET_ENV: value}).invoke(
        cli, ["traces", "merge", "-o", str(out), str(path)]
    )
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {BUDGET_ENV}=") and message in lines[0]


def _dry_run_rss_mb(path: Path, tmp: Path, budget: str | None = None) -> float:
    """Peak RSS (MB) of ``tailreplay replay --dry-run`` on ``path`` in its own process."""
    out = tmp / "dry.msgpack"
    out.unlink(missing_ok=True)
    code, err, rss = run_measured(
        ["replay", "--dry-run", "--out", str(out), str(path)],
        tmp,
        timeout_s=120,
        env={BUDGET_ENV: budget} if budget is not None else None,
    )
    assert code == 0, err
    return rss


def test_a_dry_run_of_one_window_of_small_records_is_bounded_by_the_budget(
    tmp_path: Path,
) -> None:
    # 200,000 records in one re-ordering window: held whole they take ~85 MB.
    rng = random.Random(5)
    maps = [{"start_ns": T0 + i * 1000, "duration_ns": 10**8, "status": 200,
             "input_tokens": rng.randint(1, 4000), "output_tokens": 9,
             "trace_id": rng.randbytes(16)} for i in range(200_000)]  # fmt: skip
    path = _write(tmp_path / "one-window.msgpack.zst", maps)
    small = _dry_run_rss_mb(path, tmp_path, "16MiB")
    large = _dry_run_rss_mb(path, tmp_path, "2GiB")
    assert small < 130, small
    assert large > small + 50, (small, large)


def test_a_dry_run_of_60_mb_records_stays_under_500_mb(tmp_path: Path) -> None:
    # Six 60 MB request bodies starting together (the default budget holds few of them),
    # each with one random byte in 256: they compress about 70x (zeros would be a bomb).
    body = bytearray(60 << 20)
    body[::256] = random.Random(1).randbytes(len(body[::256]))
    maps = [{"start_ns": T0 + i, "duration_ns": 10**9, "status": 200, "input_tokens": 10,
             "output_tokens": 5, "req_body": body} for i in range(6)]  # fmt: skip
    path = tmp_path / "big.msgpack.zst"
    with open(path, "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as z:
        z.write(msgpack.packb(CAPTURE))
        for m in maps:
            z.write(msgpack.packb(m))
    del maps, body
    assert path.stat().st_size < 16 << 20
    assert _dry_run_rss_mb(path, tmp_path) < 500
