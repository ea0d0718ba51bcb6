"""Arrival models keep the burstiness a P99 depends on: on traces of 50,000 requests
from known processes, quantised or not, the fitted model's index of dispersion at 3,
30 and 60 s is the process's within 15% (wider where the recording holds too few
windows to know its own index that well), and a quantised clock is found and kept.

The process's index is measured on a long run of the known process (4M arrivals): a
recording of 50,000 holds only 80 to 140 windows of a minute, whose variance is
itself uncertain by 15-30% for traffic this bursty."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.workload.burstiness import index_of_dispersion
from tailreplay.traces.workload.fit import at_exact_rate, fit, synthesize
from tailreplay.traces.workload.hmm import Mmpp
from tailreplay.traces.workload.workload_model import Workload
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9
N = 50_000


def _weibull(rng: np.random.Generator, n: int = N) -> np.ndarray:
    """A renewal process: Weibull(0.6) gaps at 10 req/s (index of dispersion ~3)."""
    k = 0.6
    return np.cumsum(rng.weibull(k, n) / 10 / math.gamma(1 + 1 / k))


def _modulated(rng: np.random.Generator, n: int = N) -> np.ndarray:
    """A Markov-modulated process: 4 req/s, with rush spells of 25 req/s lasting ~25 s."""
    mmpp = Mmpp(1.0, [4.0, 25.0], [[0.99, 0.01], [0.04, 0.96]], [1.0, 0.0], 0.0, 0.0)
    counts, _ = mmpp.counts(rng, int(n / mmpp.mean_rate * 1.1), None, 0)
    bins = np.repeat(np.arange(counts.size), counts)
    return np.sort(bins + rng.random(bins.size))[:n]


def _archive(path: Path, times: np.ndarray, rng: np.random.Generator) -> Path:
    inputs = np.ceil(rng.gamma(2.0, 300.0, times.size)).astype(int)
    outputs = np.ceil(rng.gamma(1.5, 80.0, times.size)).astype(int)
    maps = [{"start_ns": T0 + round(t * 1e9), "input_tokens": int(a), "output_tokens": int(b)}
            for t, a, b in zip(times, inputs, outputs, strict=True)]  # fmt: skip
    return write_plain(path, maps)


def _within(windows: float) -> float:
    """How near the model's index must come to the process's: 15%, or twice the
    relative standard error of a variance from the recording's ``windows`` windows,
    sqrt(2 / (W - 1)), where that is wider (28% for 100 windows of a minute). The
    model can only follow the recording it was fitted to, and a recording of 100
    windows is itself that far from its process as often as not."""
    return max(0.15, 2 * math.sqrt(2 / (windows - 1)))


@pytest.mark.parametrize("process", ["weibull", "modulated"])
@pytest.mark.parametrize("tick_s", [None, 1.0, 3.0])
def test_the_model_keeps_the_index_of_dispersion(
    tmp_path: Path, process: str, tick_s: float | None
) -> None:
    rng = np.random.default_rng(7)
    make = _weibull if process == "weibull" else _modulated
    times, truth = make(rng), make(rng, 4_000_000)
    if tick_s is not None:
        times, truth = (np.floor(t / tick_s) * tick_s for t in (times, truth))
    model = fit([_archive(tmp_path / "a.msgpack", times, rng)])
    a = model.arrivals
    assert a.clock.tick_s == tick_s
    if tick_s is not None:
        assert a.mmpp.bin_s == tick_s
    # Each process is recognised, on ticks too, where only counts of whole ticks are
    # seen: the renewal's shape is found from them.
    if process == "weibull":
        assert a.kind == "renewal" and a.renewal is not None
        assert a.renewal.shape == pytest.approx(0.6, abs=0.05)
    else:
        assert a.kind == "mmpp"
    windows, modelled = a.burstiness["windows_s"], a.burstiness["model"]
    process_idc = [index_of_dispersion(truth, w) for w in windows if w is not None]
    span = times[-1] - times[0]
    for window, p, m in zip(windows, process_idc, modelled, strict=True):
        assert p is not None and m is not None
        assert m == pytest.approx(p, rel=_within(span / window)), (
            window,
            process_idc,
            modelled,
            a.scores,
        )
    # and the recording's own index where it holds enough windows to estimate it (3 s)
    assert modelled[0] == pytest.approx(a.burstiness["recorded"][0], rel=0.15)
    assert not any("Poisson" in w for w in model.warnings)


@pytest.fixture(scope="module")
def quantised(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Workload, np.ndarray]]:
    """Per process, 20,000 arrivals on 3 s ticks and the model fitted to them (a fit
    takes seconds: the two tests of quantised synthesis share it)."""
    out = {}
    for process, make in (("weibull", _weibull), ("modulated", _modulated)):
        rng = np.random.default_rng(3)
        times = np.floor(make(rng)[:20_000] / 3.0) * 3.0
        path = _archive(tmp_path_factory.mktemp(process) / "a.msgpack", times, rng)
        out[process] = fit([path]), times
    return out


@pytest.mark.parametrize("process", ["weibull", "modulated"])
def test_synthesis_of_a_quantised_trace_stays_on_its_ticks(
    tmp_path: Path, process: str, quantised: dict[str, tuple[Workload, np.ndarray]]
) -> None:
    model, times = quantised[process]
    assert model.arrivals.kind == ("renewal" if process == "weibull" else "mmpp")
    ties = f"{100 * np.mean(np.diff(times) == 0):.0f}% of gaps are 0"
    assert model.describe()[0].endswith(f"timestamps are quantised to 3 s ticks ({ties})")
    out = tmp_path / "s.msgpack"
    synthesize(model, out, count=5_000, seed=2)
    starts = np.array([r.start_ns for r in ArchiveReader([out])])
    assert ((starts - starts[0]) % 3_000_000_000 == 0).all()


def test_a_poisson_baseline_has_the_same_requests_at_poisson_times(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    model = fit([_archive(tmp_path / "a.msgpack", _modulated(rng)[:20_000], rng)])
    # Lengths that do not follow the arrival state: the very same requests.
    assert model.lengths.state_weights is not None
    model = replace(model, lengths=replace(model.lengths, state_weights=None))
    paths = {kind: tmp_path / f"{kind}.msgpack" for kind in ("model", "poisson")}
    for kind, path in paths.items():
        assert synthesize(model, path, count=20_000, seed=9, arrivals=kind) == 20_000
    model_run, poisson_run = (list(ArchiveReader([p])) for p in paths.values())
    shapes = [[(r.input_tokens, r.output_tokens, r.trace_id) for r in run]
              for run in (model_run, poisson_run)]  # fmt: skip
    assert shapes[0] == shapes[1]
    idc = {kind: index_of_dispersion(np.array([r.start_ns for r in run]) / 1e9, 30.0)
           for kind, run in (("model", model_run), ("poisson", poisson_run))}  # fmt: skip
    assert idc["poisson"] == pytest.approx(1.0, abs=0.4)
    assert idc["model"] > 10 * idc["poisson"]


@pytest.mark.parametrize("process", ["weibull", "modulated"])
def test_a_synthesis_at_an_exact_rate_spans_count_over_rate(
    tmp_path: Path, process: str, quantised: dict[str, tuple[Workload, np.ndarray]]
) -> None:
    # validate-model's arms: as many requests as a window at exactly its rate, where a
    # plain draw of this bursty a process spans a few percent more or less, on ticks
    # (3 s) where the model has them.
    model, _ = quantised[process]
    for seed in (1, 2, 3):
        out = tmp_path / f"s{seed}.msgpack"
        synthesize(model, out, count=3_000, rate_rps=5.0, seed=seed, exact_rate=True)
        starts = np.array([r.start_ns for r in ArchiveReader([out])])
        assert starts.size == 3_000
        assert (starts[-1] - starts[0]) / 1e9 == pytest.approx(2_999 / 5.0, abs=3.0)
        assert ((starts - starts[0]) % 3_000_000_000 == 0).all()
    loose = tmp_path / "loose.msgpack"
    synthesize(model, loose, count=3_000, rate_rps=5.0, seed=1)
    shapes = [
        [r.input_tokens for r in ArchiveReader([p])] for p in (loose, tmp_path / "s1.msgpack")
    ]
    assert shapes[0] == shapes[1]  # the same requests, only their times stretched


@pytest.mark.parametrize("stretch", [0.97, 1.02, 1.05])
def test_a_poisson_arm_made_exact_on_ticks_stays_poisson_at_the_tick(stretch: float) -> None:
    # validate-model's Poisson arm is drawn on the recording's 3 s ticks and stretched
    # by a few percent to the window's exact rate: back on the grid, its counts per
    # tick must still be Poisson's (index of dispersion 1), no tick emptied or doubled
    # by the grid. 40,000 arrivals at 10 req/s: ~1,300 ticks, the index's own noise
    # about ±4%.
    rng = np.random.default_rng(11)
    count, tick = 40_000, 3.0
    on_grid = np.floor(np.cumsum(rng.exponential(0.1, count)) / tick) * tick
    rate = (count - 1) / (float(on_grid[-1] - on_grid[0]) * stretch)
    (times, _, _), *_ = at_exact_rate(iter([(on_grid, None, math.inf)]), count, rate, tick, rng)
    assert times.size == count
    assert ((times / tick) % 1 == 0).all()
    assert (times[-1] - times[0]) == pytest.approx((count - 1) / rate, abs=tick)
    assert index_of_dispersion(times, tick) == pytest.approx(1.0, rel=0.15)


def test_a_model_of_the_older_format_is_refused_with_one_line(tmp_path: Path) -> None:
    old = tmp_path / "m.json"
    old.write_text('{"format": "tailreplay-workload", "version": 1}')
    from tailreplay.errors import InputError

    with pytest.raises(InputError, match="version 1 is not 2; fit it again"):
        Workload.load(old)
