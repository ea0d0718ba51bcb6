"""`tailreplay sim calibrate`: a replay against a simulator with a hidden profile, and
the profile fitted from its results; the estimators on synthetic data with known
parameters; unusable results and bad options as one line and their exit codes."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.sim.calibrate import Timeline, calibrate
from tailreplay.sim.calibration_data import read_results
from tailreplay.sim.calibration_fits import (
    batch_sizes,
    fit_block_size,
    fit_decode,
    fit_prefill,
    prefills_ending,
    with_prefill,
)
from tailreplay.sim.launcher import sim_process
from tailreplay.sim.profiles import PROFILES, load_profile, profile
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.writer import ArchiveWriter
from tests.helpers import TWIN_HIDDEN, ramping_window, sim_slowdown_between, sim_steps

T0 = 1_700_000_000 * 10**9


def test_the_fit_recovers_a_hidden_profile(tmp_path: Path) -> None:
    window, results = tmp_path / "window.msgpack", tmp_path / "results.msgpack"
    ramping_window(window, seconds=20.0, rate_to=14.0, seed=11)
    hidden = [f"--{k.replace('_', '-')}={v}" for k, v in TWIN_HIDDEN.items()]
    with sim_process(["--profile", "fast", "--nice", "5", "--seed", "3", *hidden]) as url:
        before = sim_steps(url)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tailreplay",
                "replay",
                str(window),
                "--target",
                url,
                "--out",
                str(results),
                "--tail-stretch",
                "1",
                "--seed",
                "5",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        slowdown = max(sim_slowdown_between(before, sim_steps(url)), 0.0)
    assert done.returncode == 0, done.stderr[-2000:]
    fitted = calibrate([results], profile("fast"))
    p = fitted.profile
    got = {k: getattr(p, k) for k in TWIN_HIDDEN}
    errors = {k: got[k] / v - 1 for k, v in TWIN_HIDDEN.items()}
    print(f"recovery errors: {errors}; batch sizes {fitted.batch_range}; residuals")
    print(f"{fitted.residuals}; simulator steps {slowdown:.1%} longer than modelled")

    # A simulator that ran late (a busy machine) took longer steps than its model: the
    # fit measures the steps taken, so the upper bound widens by how much longer. Its
    # CPU per step grows with the streams it writes to, so its lateness grows with the
    # batch and lands on the slope: the slope's bound widens by the lateness as a share
    # of what the slope accounts for in a mean step.
    batch = float(np.mean(Timeline.of(read_results([results])).gap_batch))
    per_seq = TWIN_HIDDEN["decode_per_seq_ms"] * batch
    step = TWIN_HIDDEN["decode_base_ms"] + per_seq
    late = {
        "prefill_per_token_ms": slowdown,
        "decode_base_ms": slowdown,
        "decode_per_seq_ms": slowdown * step / per_seq,
    }
    for name, more in late.items():
        assert -0.10 <= errors[name] <= 0.10 + more, (name, got[name], TWIN_HIDDEN[name], more)
    # The prefill's base is the intercept of a line through prefills of 30..3,000 tokens
    # (12..160 ms at the hidden cost): a 10 ms intercept is a small part of what is
    # measured, where the decode subtracted from each prefill step and the client's
    # timing of the step boundaries land, so it is weakly identified: within 2-12% on a
    # quiet machine, 63% off with two busy loops beside the test. Held to ±80% (2-18 ms).
    assert abs(errors["prefill_base_ms"]) <= 0.8 + slowdown, got["prefill_base_ms"]
    assert p.served_model == "twin-model" and fitted.served_model == "twin-model"
    assert p.prefix_caching and fitted.batch_range[0] == 1 and fitted.batch_range[1] >= 20
    assert fitted.residuals.ttft_median < 0.25 and fitted.residuals.latency_median < 0.25


# -- the estimators on synthetic data with known parameters ---------------------------


def test_batch_sizes_count_the_decodes_spanning_each_instant() -> None:
    first = np.array([0.0, 1.0, 2.0, np.nan])
    last = np.array([3.0, 1.5, 4.0, np.nan])
    assert batch_sizes(first, last, np.array([0.5, 1.2, 2.5, 3.5, 5.0])).tolist() == [1, 2, 2, 1, 0]


def test_a_gap_ending_with_another_first_token_held_a_prefill() -> None:
    # Gaps of 20 ms ending at 0.02, 0.04, 0.06; a first token 0.5 ms after the second's end.
    starts, gaps = np.array([0.0, 0.02, 0.04]), np.full(3, 0.02)
    assert with_prefill(starts, gaps, np.array([0.0405])).tolist() == [False, True, False]
    assert prefills_ending(
        np.array([0.04]), np.array([0.02]), np.array([0.04, 0.041])
    ).tolist() == [2]


def test_fit_decode_recovers_a_line_through_noisy_gaps_with_outliers() -> None:
    rng = np.random.default_rng(1)
    batch = rng.integers(1, 60, 20_000)
    gaps = 12.0 + 0.25 * batch + rng.normal(0, 1.0, len(batch))
    stretched = rng.random(len(batch)) < 0.1  # a tenth of the gaps held a late read
    gaps[stretched] += rng.exponential(30, stretched.sum())
    fit = fit_decode(batch, gaps)
    assert fit is not None
    assert fit.base == pytest.approx(12.0, rel=0.05) and fit.slope == pytest.approx(0.25, rel=0.05)
    assert fit.x_range == (1.0, 59.0)


def test_fit_decode_needs_three_batch_sizes() -> None:
    assert fit_decode(np.full(100, 4), np.full(100, 10.0)) is None
    assert fit_decode(np.array([1] * 100 + [2] * 100 + [3] * 5), np.full(205, 10.0)) is None
    assert fit_decode(np.array([1] * 100 + [2] * 100 + [3] * 20), np.full(220, 10.0)) is not None


def test_fit_prefill_finds_the_lower_envelope() -> None:
    rng = np.random.default_rng(2)
    tokens = np.exp(rng.uniform(np.log(20), np.log(6000), 800)).astype(int)
    true = 8.0 * np.ceil(tokens / 2048) + 0.05 * tokens
    measured = true + rng.normal(0, 0.3, len(tokens))
    shared = rng.random(len(tokens)) < 0.6  # others' prefills and late admissions: only more
    measured[shared] += rng.exponential(40, shared.sum())
    fit = fit_prefill(tokens, measured, chunk=2048)
    assert fit is not None
    assert fit.slope == pytest.approx(0.05, rel=0.03) and fit.base == pytest.approx(8.0, abs=1.5)
    assert fit_prefill(np.full(50, 100), np.full(50, 9.0), chunk=2048) is None


def test_block_size_is_the_common_divisor_of_the_hits() -> None:
    assert fit_block_size(np.array([0, 32, 48, 160, 16 * 7, 64, -1])) == 16
    assert fit_block_size(np.array([0, 32, 64])) is None  # too few hits to say


def _engine_timeline(
    rng: np.random.Generator,
    known: dict[str, float],
    cap: int,
    n: int = 500,
    span_s: float = 25.0,
    prompt_max: int = 3000,
) -> list[Record]:
    """Results of the simulator's time model run offline (no clock): arrivals over
    ``span_s`` (25 s: ramping from 1 to 40 per second), each step admitting what
    arrived before it (up to ``cap`` running), prefilling the admitted prompts (30 to
    ``prompt_max`` tokens) and decoding the rest; every token at the step's end, as
    ``sim/batching.py`` hands them out."""
    arrivals = np.sort(rng.uniform(0, 1, n) ** 0.5) * span_s  # the rate grows linearly
    tokens = np.exp(rng.uniform(np.log(30), np.log(prompt_max), n)).astype(int)
    outputs = rng.integers(20, 61, n)
    times: list[list[float]] = [[] for _ in range(n)]
    running: list[int] = []
    t, due = 0.0, 0
    while due < n or running:
        if not running and arrivals[due] > t:
            t = float(arrivals[due])
        admitted = []
        while due < n and arrivals[due] <= t and len(running) + len(admitted) < cap:
            admitted.append(due)
            due += 1
        cost = 0.0
        if running:
            cost += known["decode_base_ms"] + known["decode_per_seq_ms"] * len(running)
        if admitted:
            cost += known["prefill_base_ms"]
            cost += known["prefill_per_token_ms"] * float(tokens[admitted].sum())
        t += cost / 1000
        for j in running + admitted:
            times[j].append(t)
        running = [j for j in running + admitted if len(times[j]) < outputs[j]]
    return [
        Record(
            start_ns=T0 + int(arrivals[j] * 1e9),
            model="offline",
            stream=True,
            status=200,
            input_tokens=int(tokens[j]),
            cached_tokens=0,
            output_tokens=int(outputs[j]),
            ttfb_ns=int((times[j][0] - arrivals[j]) * 1e9),
            duration_ns=int((times[j][-1] - arrivals[j]) * 1e9) + 500_000,
            chunk_gaps_us=[round(g * 1e6) for g in np.diff(times[j])],
        )
        for j in range(n)
    ]


OFFLINE_KNOWN = {
    "prefill_base_ms": 8.0,
    "prefill_per_token_ms": 0.04,
    "decode_base_ms": 20.0,
    "decode_per_seq_ms": 0.5,
}
"""The costs of the offline time model most of the calibration tests run."""


def _timeline_archive(
    path: Path, seed: int, known: dict[str, float] = OFFLINE_KNOWN, n: int = 500, **shape: int
) -> Path:
    """``_engine_timeline``'s results (batches capped at 24) written as a result archive;
    ``shape``: its ``span_s`` and ``prompt_max``."""
    rng = np.random.default_rng(seed)
    with ArchiveWriter(path, header=make_header("replay")) as writer:
        for record in _engine_timeline(rng, known, cap=24, n=n, **shape):
            writer.append(record)
    return path


def test_a_fit_that_does_not_serve_its_own_input_again_says_so(tmp_path: Path) -> None:
    """500 requests in 100 ms: the batch fills before anything decodes, and the queue
    behind it, which the fit reads from requests queued behind decoding ones, goes
    unseen. The profile's twin serves the window's TTFT P50 60% short, and the
    calibration warns rather than pass its twin off as one."""
    results = _timeline_archive(tmp_path / "burst.msgpack", 4, span_s=0.1)
    fitted = calibrate([results], profile("fast"))
    assert abs(fitted.window.ttft_p50) > 0.5
    (said,) = [w for w in fitted.warnings if "serves its own input again" in w]
    assert said.startswith(
        f"the fitted profile serves its own input again at TTFT P50 {fitted.window.ttft_p50:+.0%}"
    )
    # A window the model reads serves again exactly, and says nothing.
    steady = calibrate([_timeline_archive(tmp_path / "steady.msgpack", 4)], profile("fast"))
    assert not [w for w in steady.warnings if "serves its own input again" in w]


def test_a_profile_fitted_on_long_prompts_has_the_kv_cache_to_serve_them(tmp_path: Path) -> None:
    """Prompts up to 70,000 tokens, past the default profile's 49,152 KV tokens: the
    context and the KV cache both grow to serve them (with the context alone, the twin
    serves none of its own window and its errors are NaN)."""
    results = _timeline_archive(tmp_path / "long.msgpack", 4, n=200, prompt_max=70_000)
    fitted = calibrate([results], profile("default"))
    p = fitted.profile
    assert p.max_model_len >= 70_000 and p.kv_tokens >= p.max_model_len
    assert np.isfinite(fitted.window.ttft_p50) and np.isfinite(fitted.window.latency_p50)


def test_the_fit_recovers_the_time_model_run_offline(tmp_path: Path) -> None:
    known = OFFLINE_KNOWN
    results = _timeline_archive(tmp_path / "offline.msgpack", 4)
    # Prompts of up to 3,000 tokens take one step under fast's 8,192-token chunks, as
    # they do here.
    fitted = calibrate([results], profile("fast"))
    p = fitted.profile
    for name, value in known.items():
        assert getattr(p, name) == pytest.approx(value, rel=0.01), name
    # The batch filled and requests queued behind it: the limit is fitted.
    assert p.max_num_seqs == 24 and "max_num_seqs" in fitted.fitted
    assert "kv_tokens" in fitted.not_fitted and p.kv_tokens == PROFILES["fast"].kv_tokens
    assert p.served_model == "offline" and p.block_size == 16  # no hits: the base's
    # Without a clock's jitter the model explains its own input to the microsecond, and
    # its twin serves the window again as it was served (the first token with its step).
    assert fitted.residuals.latency_median < 0.01 and fitted.residuals.ttft_median < 0.01
    assert not p.first_token_late and fitted.window.ttft_request_ms < 1
    assert abs(fitted.window.ttft_p50) < 0.01 and abs(fitted.window.ttft_p99) < 0.01


def test_the_command_writes_the_profile_and_says_how_well_it_fits(tmp_path: Path) -> None:
    results = _timeline_archive(tmp_path / "offline.msgpack", 5)
    out = tmp_path / "profile.json"
    args = ["sim", "calibrate", str(results), "-o", str(out), "--base", "default"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert "explains its input:" in done.output and "decode 20.00 ms + 0.5000" in done.output
    assert out.stat().st_mode & 0o777 == 0o600
    written = json.loads(out.read_text())
    assert written["calibration"]["files"] == [str(results)]
    assert written["calibration"]["served_model"] == "offline"
    assert written["calibration"]["base"] == "default"
    assert written["not_fitted"]["queue_limit"] and written["queue_limit"] == 256
    loaded = load_profile(out)  # the file is a profile as it stands
    assert loaded.decode_per_seq_ms == pytest.approx(0.5, rel=0.01) and loaded.max_num_seqs == 24


# -- unusable results and bad options: one line, exit 3 and 2 --------------------------


def _results(path: Path, n: int, stream: bool, ttfb_ns: int = 50_000_000) -> Path:
    with ArchiveWriter(path, header=make_header("replay")) as writer:
        for i in range(n):
            writer.append(
                Record(
                    start_ns=T0 + i * 10**9,  # one at a time: a batch of 1
                    status=200,
                    stream=stream,
                    input_tokens=100 + i,
                    output_tokens=20,
                    duration_ns=300_000_000,
                    ttfb_ns=ttfb_ns if stream else None,
                    chunk_gaps_us=[12_000] * 19 if stream else None,
                )
            )
    return path


@pytest.mark.parametrize(
    ("n", "stream", "says"),
    [
        (200, False, "no streamed answers"),
        (12, True, "12 streamed answers; a calibration needs at least 30"),
        (200, True, "fewer than three batch sizes"),
    ],
)
def test_unusable_results_are_one_line_and_exit_3(
    tmp_path: Path, n: int, stream: bool, says: str
) -> None:
    results = _results(tmp_path / "r.msgpack", n, stream)
    done = CliRunner().invoke(
        cli, ["sim", "calibrate", str(results), "-o", str(tmp_path / "p.json")]
    )
    assert done.exit_code == 3, done.output
    assert says in done.output and "Traceback" not in done.output
    assert len(done.output.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_first_tokens_all_at_0_ms_are_unusable_results(tmp_path: Path) -> None:
    results = _results(tmp_path / "r.msgpack", 200, True, ttfb_ns=0)
    done = CliRunner().invoke(
        cli, ["sim", "calibrate", str(results), "-o", str(tmp_path / "p.json")]
    )
    assert done.exit_code == 3, done.output
    assert done.output.strip().endswith(
        "every streamed answer's first token came at 0 ms: without first-token times "
        "the prefill cost cannot be fitted"
    )
    assert len(done.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--base", "huge"], 2, "'huge' is not one of"),
        (["-o", "/no/such/dir/p.json"], 2, "no such directory"),
        ([], 2, "Missing option '-o'"),
    ],
)
def test_bad_options_exit_2(tmp_path: Path, args: list[str], code: int, says: str) -> None:
    results = _results(tmp_path / "r.msgpack", 40, True)
    out = [] if not args or args[0] == "-o" else ["-o", str(tmp_path / "p.json")]
    done = CliRunner().invoke(cli, ["sim", "calibrate", str(results), *out, *args])
    assert done.exit_code == code, done.output
    assert says in done.output and "Traceback" not in done.output


def test_a_file_that_is_no_archive_exits_3(tmp_path: Path) -> None:
    junk = tmp_path / "junk.msgpack"
    junk.write_bytes(b"not msgpack at all")
    done = CliRunner().invoke(cli, ["sim", "calibrate", str(junk), "-o", str(tmp_path / "p.json")])
    assert done.exit_code == 3 and "Traceback" not in done.output


def test_a_profile_file_round_trips_and_a_bad_one_exits_3(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    fast = PROFILES["fast"]
    good.write_text(json.dumps({**asdict(fast), "fitted": {}, "calibration": {}}))
    assert load_profile(good) == fast and profile(str(good)) == fast
    bad.write_text(json.dumps({**asdict(fast), "decode_base_ms": "fast"}))
    done = CliRunner().invoke(cli, ["sim", "--profile", str(bad), "--listen", "127.0.0.1:0"])
    assert done.exit_code == 3 and "'decode_base_ms' must be a float" in done.output
    done = CliRunner().invoke(cli, ["sim", "--profile", str(tmp_path / "none.json")])
    assert done.exit_code == 2 and "is not one of" in done.output


def test_running_a_fitted_profile_with_another_model_or_slot_count_warns(tmp_path: Path) -> None:
    fitted = tmp_path / "fitted.json"
    fit = {"served_model": "the model 40 requests named", "max_num_seqs": "the most seen"}
    as_fitted = {"served_model": "twin-model", "max_num_seqs": 4, "fitted": fit}
    fitted.write_text(json.dumps({**asdict(PROFILES["fast"]), **as_fitted}))
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tailreplay.sim",
            "--listen",
            "127.0.0.1:0",
            "--profile",
            str(fitted),
            "--served-model",
            "other",
            "--max-num-seqs",
            "8",
            "--output-mean",  # not fitted in this file: a free choice
            "50",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("tailreplay sim listening on ")
    finally:
        child.terminate()
        _, stderr = child.communicate(timeout=20)
    said = f"warning: {fitted} was fitted to served_model 'twin-model'; running with 'other'"
    assert said in stderr
    assert f"{fitted} was fitted to max_num_seqs 4; running with 8: another slot count" in stderr
    assert "output_mean" not in stderr


def test_replay_warns_of_a_twin_run_with_another_slot_count_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tailreplay.cli.sim import builtin_sim
    from tailreplay.errors import InputError

    twin, bad = tmp_path / "twin.json", tmp_path / "bad.json"
    fitted = {"max_num_seqs": 4, "fitted": {"max_num_seqs": "the most seen decoding"}}
    twin.write_text(json.dumps({**asdict(PROFILES["fast"]), **fitted}))
    builtin_sim("fast", 0, [f"--profile={twin}", "--max-num-seqs=4", "--queue-limit=9"])
    assert capsys.readouterr().err == ""  # the fitted value again, and a free field
    builtin_sim("fast", 0, [f"--profile={twin}", "--max-num-seqs=8"])
    said = f"warning: {twin} was fitted to max_num_seqs 4; running with 8: another slot count"
    assert capsys.readouterr().err.startswith(said)
    bad.write_text("{")
    with pytest.raises(InputError, match=r"bad\.json: not a usable profile"):
        builtin_sim("fast", 0, [f"--profile={bad}"])


def test_a_cost_fitted_below_zero_is_held_at_zero_and_said(tmp_path: Path) -> None:
    # An engine whose decode step shrinks as the batch grows: no engine is, and the
    # profile cannot hold it; the fit says so instead of showing 0 as fitted.
    known = {"prefill_base_ms": 8.0, "prefill_per_token_ms": 0.04,
             "decode_base_ms": 30.0, "decode_per_seq_ms": -0.4}  # fmt: skip
    results = _timeline_archive(tmp_path / "shrinking.msgpack", 4, known)
    fitted = calibrate([results], profile("fast"))
    assert fitted.profile.decode_per_seq_ms == 0.0
    (said,) = [w for w in fitted.warnings if w.startswith("decode_per_seq_ms fitted at -0.4")]
    assert said.endswith(
        "below 0 (the results do not show the cost growing with the work): 0 in the profile"
    )


def _late_first_token_archive(
    path: Path, n: int, seed: int, followed: float = 0.0, every_s: float = 3.0
) -> None:
    """Results of an engine that, like llama.cpp's server, sends a request's first
    token one step after its prefill's step: each step costs 10 ms, 15 ms a sequence
    decoding and 2 ms a prompt token; up to 4 requests at once; one arrival in
    ``every_s`` on average (at 3 s, 29 of 80 prefilled beside another request's
    decode). A share
    ``followed`` of the requests is sent 30 ms after the one before, with a prompt of
    400 tokens or more: during its prefill, so that it joins the step that brings the
    first one's first token."""
    rng = np.random.default_rng(seed)
    arrivals = list(np.cumsum(rng.exponential(every_s, n)))
    sizes = [int(x) for x in np.exp(rng.uniform(np.log(30), np.log(600), n))]
    for i in range(1, n):
        if rng.random() < followed and arrivals[i] - arrivals[i - 1] > 0.03:
            arrivals[i], sizes[i] = arrivals[i - 1] + 0.03, max(sizes[i], 400)
    outs = [int(x) for x in rng.integers(20, 61, n)]
    tokens: list[list[float]] = [[] for _ in range(n)]
    t, waiting, running, hidden = 0.0, 0, [], []  # running: decoding; hidden: just prefilled
    while waiting < n or running or hidden:
        if not running and not hidden and arrivals[waiting] > t:
            t = arrivals[waiting]
        new = []
        while waiting < n and arrivals[waiting] <= t and len(running) + len(hidden) + len(new) < 4:
            new.append(waiting)
            waiting += 1
        decoding = running + hidden
        t += (10 + 15 * len(decoding) + 2 * sum(sizes[i] for i in new)) / 1e3
        for i in decoding:
            tokens[i].append(t)
        running = [i for i in decoding if len(tokens[i]) < outs[i]]
        hidden = new
    with ArchiveWriter(path, header=make_header("test")) as writer:
        for i in range(n):
            start, times = arrivals[i], tokens[i]
            writer.append(
                Record(
                    start_ns=T0 + round(start * 1e9),
                    method="POST",
                    path="/v1/chat/completions",
                    model="late",
                    stream=True,
                    input_tokens=sizes[i],
                    cached_tokens=0,
                    output_tokens=outs[i],
                    status=200,
                    ttfb_ns=round((times[0] - start) * 1e9),
                    chunk_gaps_us=[round((b - a) * 1e6) for a, b in itertools.pairwise(times)],
                    duration_ns=round((times[-1] - start) * 1e9),
                )
            )


def test_the_prefill_of_an_engine_that_sends_the_first_token_a_step_late(
    tmp_path: Path,
) -> None:
    """Beside a running batch, the step such an engine's first token ended is a decode;
    read as the prefill, it made the fit a tenth of the cost. The requests that found
    the engine idle give it (their TTFT: the prefill, then one decode step of their
    own), and serving the window again tells the late first token from a prompt
    step's: the profile says the token comes a step late, and its twin serves the
    window's TTFT within a few percent, where the other way misses its P99 by 25%."""
    results = tmp_path / "late.msgpack"
    _late_first_token_archive(results, 80, seed=5)
    fitted = calibrate([results], profile("fast"))
    p = fitted.profile
    assert p.first_token_late
    assert p.prefill_per_token_ms == pytest.approx(2.0, rel=0.05)
    assert p.decode_per_seq_ms == pytest.approx(15.0, rel=0.05)
    # The prefill's own step: 10 ms and its tokens (the decode step after it is the
    # decode's: 10 ms and 15 a sequence).
    assert p.prefill_base_ms == pytest.approx(10.0, rel=0.05)
    assert p.decode_base_ms == pytest.approx(10.0, rel=0.05)
    w = fitted.window
    assert abs(w.ttft_p50) < 0.05 and abs(w.ttft_p99) < 0.05, w
    assert abs(w.latency_p50) < 0.05 and abs(w.latency_p99) < 0.05, w


def test_a_late_first_token_engine_seldom_idle_still_gives_its_prefill(
    tmp_path: Path,
) -> None:
    """The same engine at an arrival a second: one or two of 80 requests find it idle,
    too few to fit on, so the prefill is read beside the batch, from the two steps
    before the first token (the prefill's and the decode that brought it): read from
    the last step alone, less a second decode, the line comes out below 0. The decode
    is fitted on gaps whose step held no prefill either way: the step before a first
    token holds one here, and counted as a decode it puts 20 ms on the decode's base."""
    results = tmp_path / "busy.msgpack"
    _late_first_token_archive(results, 80, seed=5, every_s=1.0)
    p = calibrate([results], profile("fast")).profile
    assert p.first_token_late
    assert p.prefill_per_token_ms == pytest.approx(2.0, rel=0.05)
    assert p.decode_base_ms == pytest.approx(10.0, rel=0.05)
    assert p.decode_per_seq_ms == pytest.approx(15.0, rel=0.05)


def test_a_prompt_sent_during_an_idle_engines_prefill_is_not_read_as_its_cost(
    tmp_path: Path,
) -> None:
    """On such an engine a prompt sent while another is prefilling joins the step that
    brings that one's first token, and delays it by its whole prefill (llama.cpp's
    server does this with sliding-window models: a prompt's last tokens take a step
    of their own). The first request found the engine idle, but its TTFT is not its
    prefill: read as one, with two requests in five sent so, the fit took the first
    token to come with its prompt's step, at a third of the cost a token and 880 ms
    a step."""
    results = tmp_path / "followed.msgpack"
    _late_first_token_archive(results, 80, seed=5, followed=0.4)
    p = calibrate([results], profile("fast")).profile
    assert p.first_token_late
    assert p.prefill_per_token_ms == pytest.approx(2.0, rel=0.05)
    assert p.prefill_base_ms == pytest.approx(10.0, abs=5)
