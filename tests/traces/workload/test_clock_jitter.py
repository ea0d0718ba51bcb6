"""Clocks as real logs write them: a tick whose stamps jitter by ±0.1% (a 3 s clock
stamping 2,997 to 3,003 ms apart), with a share of ticks exactly on the grid.

The tick is found within 0.5%, a replay spreads each tick's requests over the real
tick (no two in one millisecond), and the workload fit counts per real tick: its
index of dispersion is the generating process's within 15%, and Poisson traffic
is fitted as Poisson.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.workload.burstiness import index_of_dispersion
from tailreplay.traces.workload.clock import detect_ticks, on_ticks
from tailreplay.traces.workload.fit import fit
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9
S = 10**9
MS = 10**6
CLOCKS_S = (1.0, 2.0, 3.0, 10.0)


def _jittered(times_s: np.ndarray, tick_s: float, seed: int, exact: float = 0.3) -> np.ndarray:
    """Start times (ns) floored to ``tick_s`` and each tick stamped up to ±0.1% of a
    tick off its grid point, in whole milliseconds; ``exact`` of the ticks on it."""
    rng = np.random.default_rng(seed)
    tick = np.floor(times_s / tick_s).astype(np.int64)
    ticks = int(tick.max()) + 1
    jitter = np.round(rng.uniform(-1e-3, 1e-3, ticks) * tick_s * 1e3) * MS
    jitter[rng.random(ticks) < exact] = 0
    return T0 + tick * round(tick_s * S) + jitter[tick].astype(np.int64)


def _poisson(rate: float, n: int, seed: int) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


def _weibull(n: int, seed: int) -> np.ndarray:
    """Weibull(0.6) gaps at 10 req/s: a renewal whose index of dispersion is ~3."""
    k = 0.6
    return np.cumsum(np.random.default_rng(seed).weibull(k, n) / 10 / math.gamma(1 + 1 / k))


@pytest.mark.parametrize("tick_s", CLOCKS_S)
@pytest.mark.parametrize("exact", [0.0, 0.3])
def test_a_jittered_tick_is_found_within_half_a_percent(tick_s: float, exact: float) -> None:
    starts = _jittered(_poisson(8 / tick_s, 5_000, seed=1), tick_s, seed=2, exact=exact)
    ticks = detect_ticks(starts)
    assert ticks is not None and ticks.quantised
    assert ticks.tick_ns == pytest.approx(tick_s * S, rel=0.005)
    assert 0 < ticks.jitter_ns <= 1.1e-3 * tick_s * S  # the ±0.1% it was written with
    # Each stamp belongs to its own tick: none falls into the tick before.
    snapped, clock = on_ticks(starts)
    assert clock.tick_s == pytest.approx(tick_s, rel=0.005)
    true_tick = (starts - T0 + round(tick_s * S) // 2) // round(tick_s * S)
    got_tick = np.round((snapped - snapped[0]) / ticks.tick_ns) + true_tick[0]
    assert (got_tick == true_tick).all()


def test_an_exact_clock_is_still_exact() -> None:
    starts = _jittered(_poisson(4, 5_000, seed=3), 3.0, seed=4, exact=1.0)
    ticks = detect_ticks(starts)
    assert ticks is not None and (ticks.tick_ns, ticks.jitter_ns) == (3 * S, 0)


def test_stats_show_the_clock_with_its_jitter(tmp_path: Path) -> None:
    starts = _jittered(_poisson(5, 3_000, seed=5), 3.0, seed=6)
    archive = write_plain(tmp_path / "a.msgpack", [{"start_ns": int(s)} for s in starts])
    result = CliRunner().invoke(cli, ["traces", "stats", str(archive)])
    assert result.exit_code == 0, result.output
    line = result.stdout.splitlines()[1]
    assert line.startswith("clock: timestamps are quantised to 3 s ticks (jitter ")
    assert line.endswith("% of gaps are 0)")


def _tick_archive(path: Path, starts: np.ndarray) -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    maps = [
        {
            "start_ns": int(s),
            "trace_id": rng.bytes(16),
            "span_id": i.to_bytes(8, "big"),
            "method": "POST",
            "path": "/v1/chat/completions",
            "input_tokens": 50,
            "output_tokens": 4,
            "duration_ns": 5 * 10**8,
        }
        for i, s in enumerate(starts.tolist())
    ]
    write_plain(path, maps)
    return maps


def test_replay_spreads_each_jittered_tick_over_the_real_tick(tmp_path: Path) -> None:
    # Up to ~35 requests a tick, stamped together: a 1 ms tick sent each 3 s tick as
    # one burst.
    starts = _jittered(_poisson(7, 4_000, seed=8), 3.0, seed=9)
    archive = tmp_path / "a.msgpack"
    _tick_archive(archive, starts)
    out = tmp_path / "dry.msgpack"
    result = CliRunner().invoke(cli, ["replay", "--dry-run", "--out", str(out), str(archive)])
    assert result.exit_code == 0, result.output
    first = result.stderr.splitlines()[0]
    assert first.startswith("timestamps are quantised to 3 s ticks (jitter ")
    assert first.endswith(
        "spreading each tick's requests over the tick (--no-spread-ticks keeps the bursts)"
    )
    intended = np.array([r.intended_ns for r in ArchiveReader([out], order="file")])
    assert intended.size == starts.size
    assert np.unique(intended).size == intended.size  # each its own place: no two at once
    # Each tick's requests stay in their tick, spread over all of it.
    true_tick = (starts - T0 + 3 * S // 2) // (3 * S)
    sent_tick = (intended - T0) // (3 * S)
    assert Counter(sent_tick.tolist()) == Counter(true_tick.tolist())
    within = ((intended - T0) % (3 * S)) / S
    assert np.histogram(within, bins=3, range=(0, 3))[0].min() > intended.size / 3 * 0.8


def _archive(path: Path, starts: np.ndarray) -> Path:
    rng = np.random.default_rng(11)
    inputs = np.ceil(rng.gamma(2.0, 300.0, starts.size)).astype(int)
    outputs = np.ceil(rng.gamma(1.5, 80.0, starts.size)).astype(int)
    maps = [
        {"start_ns": int(s), "input_tokens": int(a), "output_tokens": int(b)}
        for s, a, b in zip(starts, inputs, outputs, strict=True)
    ]
    return write_plain(path, maps)


@pytest.mark.parametrize("tick_s", CLOCKS_S)
def test_the_fit_counts_per_real_tick(tmp_path: Path, tick_s: float) -> None:
    times = _weibull(50_000, seed=12)
    truth = np.floor(_weibull(4_000_000, seed=13) / tick_s) * tick_s
    model = fit([_archive(tmp_path / "a.msgpack", _jittered(times, tick_s, seed=14))])
    a = model.arrivals
    assert a.clock.tick_s == pytest.approx(tick_s, rel=1e-5) and a.clock.jitter_s > 0
    assert a.kind == "renewal" and a.renewal is not None
    assert a.renewal.shape == pytest.approx(0.6, abs=0.05)
    windows, modelled = a.burstiness["windows_s"], a.burstiness["model"]
    # All three windows, on every clock: at 3 s, a 10 s clock's counts are the
    # quantised process's (an index of ~73: a tick's requests fall in one window).
    judged = {3.0, 30.0, 60.0}
    assert judged <= set(windows)
    for window, m in zip(windows, modelled, strict=True):
        if window in judged:
            p = index_of_dispersion(truth, window)
            assert m == pytest.approx(p, rel=0.15), (window, modelled, a.scores)
    assert "jitter" in model.describe()[0]


def test_poisson_traffic_on_a_jittered_clock_is_fitted_as_poisson(tmp_path: Path) -> None:
    # Counted per jittered stamp, a tick stamped 2,999 ms fell into the window
    # before: windows looked empty, the index of dispersion at 3 s read ~5 and a
    # Weibull of shape ~0.3 was fitted to Poisson traffic.
    starts = _jittered(_poisson(5, 20_000, seed=15), 3.0, seed=16)
    model = fit([_archive(tmp_path / "a.msgpack", starts)])
    a = model.arrivals
    assert (a.kind, a.mmpp.states) == ("mmpp", 1)
    # A renewal of shape ~1.04 matched the 3 s index's sampling noise better; within
    # the noise no candidate beats Poisson, and the model says so.
    assert model.describe()[1].startswith("arrivals: Poisson at 4.9")
    assert "no candidate reproduced the recording's burstiness better" in model.describe()[1]
    # Counted per real tick, the recording reads Poisson's index where it holds enough
    # windows to tell (1,342 of 3 s; its 133 of 30 s read 1.3, as the exact clock's do).
    assert a.burstiness["windows_s"][0] == 3.0
    assert a.burstiness["recorded"][0] == pytest.approx(1.0, rel=0.15), a.burstiness
    assert all(m == pytest.approx(1.0, rel=0.05) for m in a.burstiness["model"]), a.burstiness


# --- Logs an outside attack wrote: each of these found the wrong tick, or none ---------


def _per_stamp(times_s: np.ndarray, tick_s: float, seed: int) -> np.ndarray:
    """Floored to ``tick_s``, each request stamped up to ±0.1% of a tick off on its own."""
    rng = np.random.default_rng(seed)
    tick = np.floor(times_s / tick_s).astype(np.int64)
    jitter = np.round(rng.uniform(-1e-3, 1e-3, tick.size) * tick_s * 1e3) * MS
    return np.sort(T0 + tick * round(tick_s * S) + jitter.astype(np.int64))


def _finer(starts: np.ndarray, share: float, seed: int) -> np.ndarray:
    """``share`` more records from a 10 ms clock, anywhere in the span."""
    rng = np.random.default_rng(seed)
    extra = rng.integers(starts.min(), starts.max(), int(share * starts.size)) // (10 * MS)
    return np.sort(np.concatenate([starts, extra * 10 * MS]))


@pytest.mark.parametrize(
    "starts",
    [
        # 16 hours at one request a tick: a tick fitted to the steps alone drifted 90 ms
        # over the span, off the grid.
        _jittered(_poisson(1 / 3, 20_000, seed=21), 3.0, seed=22),
        _per_stamp(_poisson(8 / 3, 5_000, seed=23), 3.0, seed=24),  # intra-tick steps
        _finer(_jittered(_poisson(8 / 3, 5_000, seed=25), 3.0, seed=26), 0.004, seed=27),
        # One record half a tick before the first: the grid was measured from it.
        np.concatenate(
            [[T0 - 1_500 * MS], _jittered(_poisson(8 / 3, 5_000, seed=28), 3.0, seed=29)]
        ),
    ],
    ids=["sparse-and-long", "each-stamp-jittered", "finer-records", "early-stray"],
)
def test_the_tick_holds_on_logs_nobody_here_wrote(starts: np.ndarray) -> None:
    ticks = detect_ticks(starts)
    assert ticks is not None and ticks.quantised
    assert ticks.tick_ns == pytest.approx(3 * S, rel=0.005)
    true_tick = (starts - T0 + 3 * S // 2) // (3 * S)
    on_grid = np.abs((starts - T0) - true_tick * 3 * S) <= 3 * MS  # the strays aside
    grid = np.array([ticks.grid(int(s)) for s in starts[on_grid]])
    assert (np.abs(grid - T0 - true_tick[on_grid] * 3 * S) <= MS).all()


def test_a_mostly_exact_clock_puts_its_early_stamps_in_their_own_tick() -> None:
    starts = _jittered(_poisson(8 / 3, 20_000, seed=30), 3.0, seed=31, exact=0.995)
    ticks = detect_ticks(starts)
    assert ticks is not None and ticks.tick_ns == 3 * S and ticks.jitter_ns > 0
    true_tick = (starts - T0 + 3 * S // 2) // (3 * S)
    snapped, _ = on_ticks(starts)
    assert ((snapped - T0) // (3 * S) == true_tick).all()


def test_a_ten_second_clock_is_fitted_on_its_whole_ticks(tmp_path: Path) -> None:
    # The fitted tick (9.99999 s) made no window a whole number of ticks: the fit
    # refused the log as too short to measure burstiness.
    starts = _jittered(_poisson(0.8, 2_880, seed=32), 10.0, seed=33)
    model = fit([_archive(tmp_path / "a.msgpack", starts)])
    assert model.arrivals.clock.tick_s == 10.0
    assert model.arrivals.burstiness["windows_s"][1:] == [30.0, 60.0]


def test_a_record_out_of_order_takes_its_own_place_in_its_tick(tmp_path: Path) -> None:
    starts = _jittered(_poisson(7, 3_000, seed=34), 3.0, seed=35)
    archive = tmp_path / "a.msgpack"
    maps = _tick_archive(archive, starts)
    write_plain(archive, [maps[0], *maps[2:], maps[1]])  # the second record read last
    out = tmp_path / "dry.msgpack"
    result = CliRunner().invoke(cli, ["replay", "--dry-run", "--out", str(out), str(archive)])
    assert result.exit_code == 0, result.output
    intended = np.array([r.intended_ns for r in ArchiveReader([out], order="file")])
    # A place taken twice would send two records at one instant (their tick's same draw).
    assert np.unique(intended).size == intended.size == starts.size
