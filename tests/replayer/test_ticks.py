"""Quantised clocks: the tick found on start times, and each tick's requests spread over it.

Detection is arithmetic on arrays (parametrised tables); the spreading is checked
on dry runs through the command line, which compute exactly the due times a live
replay uses (``intended_ns``), and on the streaming schedule itself.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import tailreplay.replayer.schedule as schedule_module
from tailreplay.cli import cli
from tailreplay.replayer.schedule import ScheduleConfig, plan, schedule
from tailreplay.replayer.ticks import detect_ticks, spread_line
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9
S = 10**9
MS = 10**6


def _arrivals(rate: float, span_s: float, seed: int = 1) -> np.ndarray:
    """Poisson arrival times (ns) at ``rate`` per second over ``span_s``."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, size=int(rate * span_s * 1.5))
    t = np.cumsum(gaps)
    return T0 + np.round(t[t < span_s] * 1e9).astype(np.int64)


def _floored(t: np.ndarray, tick_ns: int, phase_ns: int = 0) -> np.ndarray:
    return t - (t - phase_ns) % tick_ns


def _with_strays(t: np.ndarray, share: float) -> np.ndarray:
    """``share`` of the timestamps moved off the grid by a few microseconds."""
    out = t.copy()
    pick = np.random.default_rng(9).random(t.size) < share
    out[pick] += 7_321
    return np.sort(out)


@pytest.mark.parametrize(
    ("starts", "tick", "quantised"),
    [
        (_floored(_arrivals(4, 600), 3 * S), 3 * S, True),
        (_floored(_arrivals(4, 600), S), S, True),
        (_floored(_arrivals(40, 60), S, phase_ns=250 * MS), S, True),
        (_floored(_arrivals(2, 900), 1500 * MS), 1500 * MS, True),  # no whole second
        (_floored(_arrivals(0.05, 40_000), S), S, False),  # few ties: a tick, not bursts
        (_floored(_arrivals(300, 20), MS), MS, True),
        (_floored(_arrivals(4, 600), MS), MS, False),
        (_with_strays(_floored(_arrivals(4, 600), 3 * S), 0.004), 3 * S, True),
        (_arrivals(4, 600), None, False),  # nanoseconds: no tick
        (_floored(_arrivals(4, 600), 50_000), None, False),  # 50 us: finer than 1 ms
        (np.full(100, T0, dtype=np.int64), None, False),  # one instant
        (_floored(_arrivals(4, 4), 3 * S), None, False),  # too few to say
    ],
    ids=str.split(
        "3s 1s 1s-phase 1.5s 1s-sparse 1ms-busy 1ms 3s-strays ns 50us one-instant too-few"
    ),
)
def test_the_tick_and_the_ties_are_found(
    starts: np.ndarray, tick: int | None, quantised: bool
) -> None:
    found = detect_ticks(starts)
    if tick is None:
        assert found is None
        return
    assert found is not None
    assert found.tick_ns == tick
    assert found.quantised is quantised
    sorted_gaps = np.diff(np.sort(starts))
    assert found.ties == pytest.approx(float(np.mean(sorted_gaps == 0)))
    assert (starts[0] - found.origin_ns) % tick == 0 or found.origin_ns % MS != 0


def test_a_large_set_is_judged_on_windows_spread_over_it() -> None:
    """Past a million starts the sample is 16 windows; the tick and ties still come out."""
    starts = _floored(_arrivals(2000, 700, seed=4), S)  # 1.4M starts, ~2,000 per tick
    found = detect_ticks(starts)
    assert found is not None and found.tick_ns == S and found.ties > 0.99


def test_the_line_says_what_is_done() -> None:
    ticks = detect_ticks(_floored(_arrivals(4, 600), 3 * S))
    assert ticks is not None
    share = f"{ticks.ties * 100:.0f}%"
    assert spread_line(ticks, None) == (
        f"timestamps are quantised to 3 s ticks ({share} of gaps are 0): spreading each "
        "tick's requests over the tick (--no-spread-ticks keeps the bursts)"
    )
    assert spread_line(ticks, False) == (
        f"timestamps are quantised to 3 s ticks ({share} of gaps are 0): each tick's "
        "requests go out together (--no-spread-ticks)"
    )
    fine = detect_ticks(_floored(_arrivals(4, 600), MS))
    assert spread_line(fine, None) is None  # not quantised, not asked: nothing to say
    assert spread_line(fine, True) is not None and "1 ms ticks" in str(spread_line(fine, True))
    assert spread_line(None, None) is None
    assert str(spread_line(None, True)).startswith("warning: --spread-ticks: the timestamps")


# --- Spreading, seen through dry runs ------------------------------------------------------


def _tick_archive(
    path: Path, *, rate: float = 4.0, span_s: float = 60.0, tick_ns: int = 3 * S,
    traced: bool = True, seed: int = 2,
) -> list[dict[str, Any]]:  # fmt: skip
    """Poisson arrivals at ``rate``/s, floored to ``tick_ns``, written in start order."""
    rng = random.Random(seed)
    starts = _floored(_arrivals(rate, span_s, seed=seed), tick_ns)
    maps = []
    for i, s in enumerate(starts.tolist()):
        m: dict[str, Any] = {
            "start_ns": s, "span_id": i.to_bytes(8, "big"), "method": "POST",
            "path": "/v1/chat/completions", "input_tokens": 50, "output_tokens": 4,
            "duration_ns": rng.randint(10**8, 10**9),
        }  # fmt: skip
        if traced:
            m["trace_id"] = rng.randbytes(16)
        maps.append(m)
    write_plain(path, maps)
    return maps


def _dry(tmp_path: Path, archive: Path, *args: str, name: str = "dry") -> tuple[list[Record], str]:
    out = tmp_path / f"{name}.msgpack"
    result = CliRunner().invoke(cli, ["replay", "--dry-run", "--out", str(out), *args,
                                      str(archive)])  # fmt: skip
    assert result.exit_code == 0, result.output
    return list(ArchiveReader([out], order="file")), result.stderr


def _per_tick(times_ns: list[int], tick_ns: int) -> Counter[int]:
    """Requests per tick (ticks counted from the epoch, as the archives are floored)."""
    return Counter(t // tick_ns for t in times_ns)


def test_each_tick_is_spread_over_the_tick_with_the_recorded_count(tmp_path: Path) -> None:
    maps = _tick_archive(tmp_path / "a.msgpack")
    got, err = _dry(tmp_path, tmp_path / "a.msgpack")
    assert err.splitlines()[0].startswith("timestamps are quantised to 3 s ticks (")
    assert err.splitlines()[0].endswith(
        "spreading each tick's requests over the tick (--no-spread-ticks keeps the bursts)"
    )
    intended = [r.intended_ns for r in got]
    assert intended == sorted(intended)  # the schedule still comes in due order
    assert _per_tick(intended, 3 * S) == _per_tick([m["start_ns"] for m in maps], 3 * S)
    assert len(set(intended)) == len(intended)  # no two at one instant
    recorded = {m["trace_id"]: m["start_ns"] for m in maps}
    offsets = np.array([r.intended_ns - recorded[r.orig_trace_id] for r in got]) / 1e9
    assert offsets.min() >= 0 and offsets.max() < 3.0
    # Spread, not bunched: the offsets within the tick look uniform.
    assert np.histogram(offsets, bins=3, range=(0, 3))[0].min() > len(got) / 3 * 0.6


def test_no_spread_ticks_keeps_the_bursts(tmp_path: Path) -> None:
    maps = _tick_archive(tmp_path / "a.msgpack")
    got, err = _dry(tmp_path, tmp_path / "a.msgpack", "--no-spread-ticks")
    assert err.splitlines()[0].startswith("timestamps are quantised to 3 s ticks (")
    assert err.splitlines()[0].endswith("each tick's requests go out together (--no-spread-ticks)")
    assert [r.intended_ns for r in got] == [m["start_ns"] for m in maps]


def test_the_draw_is_the_seeds_and_every_shard_computes_the_same(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    _tick_archive(archive)
    whole, _ = _dry(tmp_path, archive, name="whole")
    again, _ = _dry(tmp_path, archive, name="again")
    other, _ = _dry(tmp_path, archive, "--seed", "5", name="other")
    assert [r.intended_ns for r in again] == [r.intended_ns for r in whole]
    assert [r.intended_ns for r in other] != [r.intended_ns for r in whole]
    by_id = {r.orig_trace_id: r.intended_ns for r in whole}
    shards: dict[bytes | None, int] = {}
    for i in range(3):
        part, _ = _dry(tmp_path, archive, "--shard", f"{i}/3", name=f"s{i}")
        assert [r.intended_ns for r in part] == sorted(r.intended_ns for r in part)
        shards.update((r.orig_trace_id, r.intended_ns) for r in part)
    assert shards == by_id


def test_speed_dilates_the_spread_times(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    first = _tick_archive(archive)[0]["start_ns"]  # the dry run's t0: the first tick's start
    one, _ = _dry(tmp_path, archive, name="one")
    two, _ = _dry(tmp_path, archive, "--speed", "2x", name="two")
    assert [r.orig_trace_id for r in two] == [r.orig_trace_id for r in one]
    np.testing.assert_allclose([(r.intended_ns - first) / 1e9 for r in two],
                               [(r.intended_ns - first) / 2e9 for r in one], atol=1e-6)  # fmt: skip


def test_amplified_copies_each_get_their_own_place_in_the_tick(tmp_path: Path) -> None:
    maps = _tick_archive(tmp_path / "a.msgpack")
    got, _ = _dry(tmp_path, tmp_path / "a.msgpack", "--amplify", "3x")
    intended = [r.intended_ns for r in got]
    assert intended == sorted(intended) and len(set(intended)) == len(intended)
    recorded = _per_tick([m["start_ns"] for m in maps], 3 * S)
    assert _per_tick(intended, 3 * S) == Counter({k: 3 * n for k, n in recorded.items()})


def test_records_without_trace_ids_still_get_distinct_instants(tmp_path: Path) -> None:
    maps = _tick_archive(tmp_path / "a.msgpack", traced=False)
    got, _ = _dry(tmp_path, tmp_path / "a.msgpack")
    intended = [r.intended_ns for r in got]
    assert len(set(intended)) == len(intended)
    assert _per_tick(intended, 3 * S) == _per_tick([m["start_ns"] for m in maps], 3 * S)


def test_a_clock_without_ticks_is_sent_as_recorded(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    rng = random.Random(4)
    starts = _arrivals(4, 60).tolist()
    maps = [{"start_ns": s, "trace_id": rng.randbytes(16), "input_tokens": 5,
             "output_tokens": 3, "duration_ns": 10**8} for s in starts]  # fmt: skip
    write_plain(archive, maps)
    got, err = _dry(tmp_path, archive)
    assert "timestamps" not in err and [r.intended_ns for r in got] == starts
    got, err = _dry(tmp_path, archive, "--spread-ticks", name="asked")
    assert err.splitlines()[0] == (
        "warning: --spread-ticks: the timestamps share no tick of 1 ms or more; requests go "
        "out at their recorded times"
    )
    assert [r.intended_ns for r in got] == starts


def test_the_schedule_holds_at_most_one_tick_of_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spread requests wait in a heap until their tick is read; no more than that."""
    archive = tmp_path / "a.msgpack"
    maps = _tick_archive(archive, rate=20, span_s=30)
    per_tick = _per_tick([m["start_ns"] for m in maps], 3 * S)
    real_reader = schedule_module.ArchiveReader
    read: list[int] = []

    class CountingReader:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._inner = real_reader(*args, **kwargs)
            self.reorder = self._inner.reorder

        def __iter__(self) -> Any:
            for record in self._inner:
                read.append(record.start_ns)
                yield record

    monkeypatch.setattr(schedule_module, "ArchiveReader", CountingReader)
    config = ScheduleConfig(paths=[archive])
    for item in schedule(config, plan(config)):
        tick = item.record.start_ns // (3 * S)
        # Everything read so far: this tick's records, and at most one record past them.
        ahead = [t for t in read if t // (3 * S) > tick]
        assert len(ahead) <= 1
        held = sum(1 for t in read if t // (3 * S) == tick)
        assert held <= per_tick[tick]


def _dispersion(times_ns: list[int] | np.ndarray, bin_ns: int) -> float:
    """Variance over mean of the counts per ``bin_ns`` (1.0 for random arrivals)."""
    t = np.asarray(times_ns, dtype=np.int64)
    counts = np.bincount((t - t.min()) // bin_ns)
    return float(counts.var() / counts.mean())


def test_requests_go_out_at_random_in_their_tick_as_random_arrivals_would(
    tmp_path: Path,
) -> None:
    """By default each request of a tick is placed at its own draw: the sends' index of
    dispersion at 1 s is within 15% of that of the same ticks' requests placed
    uniformly at random (about 1: bursts and gaps kept), where even placement
    (--tick-placement even) reads well below it; the counts per tick stay exact."""
    archive = tmp_path / "a.msgpack"
    maps = _tick_archive(archive, rate=5, span_s=1800)
    starts = np.array([m["start_ns"] for m in maps], dtype=np.int64)
    rng = np.random.default_rng(3)
    uniform = np.mean(
        [_dispersion(starts + rng.integers(0, 3 * S, size=len(starts)), S) for _ in range(5)]
    )
    placed, _ = _dry(tmp_path, archive)
    even, _ = _dry(tmp_path, archive, "--tick-placement", "even", name="even")
    for got in (placed, even):
        intended = [r.intended_ns for r in got]
        assert _per_tick(intended, 3 * S) == _per_tick(starts.tolist(), 3 * S)
    random_iod = _dispersion([r.intended_ns for r in placed], S)
    even_iod = _dispersion([r.intended_ns for r in even], S)
    assert abs(random_iod - uniform) <= 0.15 * uniform, (random_iod, uniform)
    assert even_iod < 0.7 * uniform, (even_iod, uniform)
