"""A bursty model at another rate, read as the recording's own periods at that rate
(``periods.conditioned``), and request lengths that follow the arrival state
(``Lengths.state_weights``): on draws of known processes, the conditioned chain
spends the time in each state that windows of that rate did, and a busy state's
short answers come back in the busy state."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.errors import InputError, UsageError
from tailreplay.studies.model_check import CheckConfig, _synthesized, _Window
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.reader import read_header
from tailreplay.traces.workload.burstiness import index_of_dispersion
from tailreplay.traces.workload.fit import fit, synthesize
from tailreplay.traces.workload.hmm import Mmpp, fit_mmpps
from tailreplay.traces.workload.periods import conditioned
from tailreplay.traces.workload.workload_model import Workload
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9
TWO_STATES = Mmpp(1.0, [3.0, 9.0], [[0.95, 0.05], [0.05, 0.95]], [0.5, 0.5], 0.0, 0.0)
"""3 and 9 requests a second, 20 s in each on average: 6 req/s."""


@pytest.mark.parametrize(("lo", "hi"), [(4.0, 4.4), (6.0, 6.2), (7.0, 7.4), (8.0, 8.4)])
def test_the_conditioned_chain_spends_the_time_windows_at_that_rate_did(
    lo: float, hi: float
) -> None:
    # 10,000 windows of 200 s drawn from the model; those whose rate fell in [lo, hi)
    # spent a share of their time in the busy state that the chain conditioned on
    # their mean rate must reproduce.
    counts, path, _ = TWO_STATES.draw(np.random.default_rng(1), 2_000_000, None, 0)
    rate = counts.reshape(-1, 200).mean(1)
    picked = (rate >= lo) & (rate < hi)
    assert picked.sum() >= 100
    busy = float(path.reshape(-1, 200)[picked].mean())
    chain = conditioned(TWO_STATES, float(rate[picked].mean()))
    assert chain.stationary()[1] == pytest.approx(busy, abs=0.02)
    assert chain.mean_rate == pytest.approx(rate[picked].mean(), rel=1e-6)


def test_at_its_own_rate_the_conditioned_chain_is_the_model() -> None:
    chain = conditioned(TWO_STATES, TWO_STATES.mean_rate)
    assert chain.rates == pytest.approx(TWO_STATES.rates, rel=1e-6)
    assert np.array(chain.transitions) == pytest.approx(np.array(TWO_STATES.transitions), abs=1e-6)


def test_far_beyond_every_state_it_is_the_busiest_states_poisson() -> None:
    chain = conditioned(TWO_STATES, 30.0)
    assert chain.mean_rate == pytest.approx(30.0, rel=1e-6)
    assert chain.stationary()[1] > 0.999
    quiet = conditioned(TWO_STATES, 1.0)
    assert quiet.mean_rate == pytest.approx(1.0, rel=1e-6)
    assert quiet.stationary()[0] > 0.999


def _recording(path: Path) -> tuple[Path, dict[int, float]]:
    """40 minutes of the two-state process whose busy state's requests ask for short
    answers (a median of 60 output tokens against 250): the archive and each state's
    mean output tokens as drawn."""
    rng = np.random.default_rng(7)
    counts, states, _ = TWO_STATES.draw(rng, 2_400, None, 0)
    bins = np.repeat(np.arange(counts.size), counts)
    state = np.repeat(states, counts)
    times = bins + rng.random(bins.size)
    order = np.argsort(times)
    times, state = times[order], state[order]
    inputs = np.ceil(np.exp(rng.normal(6.5, 0.8, times.size))).astype(int)
    outputs = np.ceil(np.exp(rng.normal(np.where(state == 1, 4.1, 5.5), 0.5))).astype(int)
    maps = [
        {"start_ns": T0 + round(t * 1e9), "input_tokens": int(a), "output_tokens": int(b)}
        for t, a, b in zip(times, inputs, outputs, strict=True)
    ]
    means = {s: float(outputs[state == s].mean()) for s in (0, 1)}
    return write_plain(path, maps), means


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workload, dict[int, float]]:
    path, means = _recording(tmp_path_factory.mktemp("states") / "a.msgpack")
    return fit([path]), means


def test_each_arrival_state_draws_the_lengths_that_came_in_it(
    recorded: tuple[Workload, dict[int, float]],
) -> None:
    model, means = recorded
    assert model.arrivals.kind == "mmpp" and model.arrivals.mmpp.states == 2
    assert model.lengths.state_weights is not None
    rng = np.random.default_rng(0)
    for state in (0, 1):
        n = 100_000
        _, outputs = model.lengths.draw(
            rng.random(n), rng.standard_normal((n, 2)), np.full(n, state)
        )
        assert outputs.mean() == pytest.approx(means[state], rel=0.15)


def test_a_synthesis_at_a_busy_rate_reads_the_busy_periods(
    tmp_path: Path, recorded: tuple[Workload, dict[int, float]]
) -> None:
    """At 8.5 req/s, the recording's own periods at that rate are mostly its busy
    state, with its short answers, and less bursty; as more users, they are the whole
    mix, as bursty as the recording."""
    model, means = recorded
    got = {}
    for scaling in ("periods", "users"):
        out = tmp_path / f"{scaling}.msgpack"
        synthesize(model, out, count=30_000, rate_rps=8.5, seed=3, scaling=scaling)
        cols = load_columns([out], ["output_tokens"])
        times = (cols["start_ns"] - cols["start_ns"][0]) / 1e9
        got[scaling] = (float(cols["output_tokens"].mean()), index_of_dispersion(times, 30.0))
    (busy_out, busy_idc), (mix_out, mix_idc) = got["periods"], got["users"]
    # Mostly the busy state: each state's share of the requests as conditioned.
    chain = conditioned(model.arrivals.mmpp, 8.5)
    requests = chain.stationary() * np.array(chain.rates)
    assert requests[1] / requests.sum() > 0.9
    expected = (requests @ np.array([means[0], means[1]])) / requests.sum()
    assert busy_out == pytest.approx(expected, rel=0.15)
    assert mix_out > 1.5 * busy_out
    assert mix_idc > 2 * busy_idc


def test_state_weights_that_do_not_fit_the_model_are_refused_in_one_line(
    tmp_path: Path, recorded: tuple[Workload, dict[int, float]]
) -> None:
    model, _ = recorded
    data = model.to_json()
    components = len(data["lengths"]["weights"])
    data["lengths"]["state_weights"] = [[1.0] + [0.0] * (components - 1)]  # one state of two
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(
        InputError,
        match=r"lengths\.state_weights must be null or, for each of the 2 arrival states",
    ):
        Workload.load(bad)
    data["lengths"]["state_weights"] = None  # a model fitted before: every state alike
    good = tmp_path / "good.json"
    good.write_text(json.dumps(data))
    assert Workload.load(good).lengths.state_weights is None


def test_synth_and_validate_model_take_the_scaling(
    tmp_path: Path, recorded: tuple[Workload, dict[int, float]]
) -> None:
    model, _ = recorded
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model.to_json()))
    out = tmp_path / "s.msgpack"
    args = ["traces", "synth", str(path), "-o", str(out), "--count", "20000", "--rate", "8.5"]
    done = CliRunner().invoke(cli, [*args, "--scaling", "periods"])
    assert done.exit_code == 0, done.stderr
    assert read_header(out)["scaling"] == "periods"
    refused = CliRunner().invoke(cli, [*args, "--scaling", "louder"])
    assert refused.exit_code == 2 and "'louder' is not one of 'users', 'periods'" in refused.stderr
    # validate-model's parts for a window at 8.5 req/s: its busy periods by default.
    window = _Window(out, T0, 20_000 / 8.5, 20_000)
    got = {}
    for scaling in ("periods", "users"):
        cfg = CheckConfig(out, model, tmp_path / scaling, scaling=scaling)
        cfg.out_dir.mkdir()
        (part,) = _synthesized(cfg, [window], "model", 1)
        got[scaling] = float(load_columns([part], ["output_tokens"])["output_tokens"].mean())
    assert CheckConfig(out, model, tmp_path).scaling == "periods"
    assert got["periods"] < 0.75 * got["users"]


def test_a_chain_that_cannot_run_at_the_rate_is_refused_not_drawn_at_another() -> None:
    # State 1 never leaves: every tilt settles in state 0 (0 req/s) or in state 1
    # (5 req/s), and 1 req/s is neither; drawn, it would never bring its count.
    stuck = Mmpp(1.0, [0.0, 5.0], [[0.99, 0.01], [0.0, 1.0]], [0.5, 0.5], 0.0, 0.0)
    with pytest.raises(UsageError, match=r"cannot run at 1 req/s as its own periods"):
        conditioned(stuck, 1.0)
    assert conditioned(stuck, 5.0).mean_rate == pytest.approx(5.0, rel=1e-6)


def test_as_fewer_users_a_model_runs_at_the_rate_asked(
    tmp_path: Path, recorded: tuple[Workload, dict[int, float]]
) -> None:
    # At a twentieth of the fitted rate the quiet state's rate falls below 0 and is
    # clipped: the rates are then scaled to the mean asked, not left above it.
    model, _ = recorded
    out = tmp_path / "few.msgpack"
    written = synthesize(model, out, duration_s=172_800.0, rate_rps=0.3, seed=5)
    assert written == pytest.approx(0.3 * 172_800, rel=0.05)


def test_sparse_bursty_counts_are_offered_every_state_count_they_show() -> None:
    # Mostly empty seconds (the quiet state's 0.05 req/s) and rare bursts at 6 and 40
    # req/s, as Azure's code trace runs: over 75% of the bins are 0, so the quantiles
    # a fit starts from fall on one level for two states and more. Started from the
    # quantiles of the distinct levels, the three-state fit finds all three.
    sparse = Mmpp(
        1.0, [0.05, 6.0, 40.0],
        [[0.995, 0.004, 0.001], [0.05, 0.94, 0.01], [0.05, 0.05, 0.90]],
        [1.0, 0.0, 0.0], 0.0, 0.0,
    )  # fmt: skip
    counts, _, _ = sparse.draw(np.random.default_rng(3), 20_000, None, 0)
    assert np.mean(counts == 0) > 0.75
    fits = fit_mmpps(counts, 1.0)
    assert [m.states for m in fits] == [1, 2, 3, 4, 5, 6]
    rates = sorted(fits[2].rates)
    assert rates[0] < 0.2 and 5.0 < rates[1] < 7.0 and 36.0 < rates[2] < 44.0, rates
