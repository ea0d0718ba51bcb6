"""``traces validate-model``: the exact window, the model's synthesis and a Poisson
baseline replayed against fresh simulators, compared, and refused when the client
could not keep the schedule."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tailreplay.studies.model_check import (
    ArmResult,
    CheckConfig,
    _synthesized,
    _Window,
    errors,
    pooled,
    ranking_line,
    render,
)
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.workload.hmm import Mmpp
from tailreplay.traces.workload.workload_model import Workload
from tests.helpers import UNBOUND, drifting_lengths, write_plain

T0 = 1_700_000_000 * 10**9


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    """A modulated trace (2 and 12 req/s spells) of 40 s, and its fitted model."""
    tmp = tmp_path_factory.mktemp("vm")
    rng = np.random.default_rng(1)
    mmpp = Mmpp(1.0, [2.0, 12.0], [[0.9, 0.1], [0.2, 0.8]], [1.0, 0.0], 0.0, 0.0)
    counts, _ = mmpp.counts(rng, 40, None, 0)
    bins = np.repeat(np.arange(counts.size), counts)
    times = np.sort(bins + rng.random(bins.size))
    maps = [{"start_ns": T0 + round(t * 1e9), "input_tokens": int(rng.integers(50, 400)),
             "output_tokens": int(rng.integers(4, 24)), "stream": True} for t in times]  # fmt: skip
    archive = write_plain(tmp / "a.msgpack", maps)
    model = tmp / "m.json"
    done = _tailreplay("traces", "fit", str(archive), "-o", str(model))
    assert done.returncode == 0, done.stderr
    return archive, model, len(maps)


def _tailreplay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tailreplay", *args], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip


def _validate(
    tmp_path: Path, archive: Path, model: Path, *extra: str, speed: str = "4x"
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``validate-model`` with one seed at ``speed`` on the fast simulator, writing
    JSON: the finished process and the JSON's path."""
    out = tmp_path / "v.json"
    done = _tailreplay("traces", "validate-model", str(archive), "--model", str(model), *extra,
                       "--seeds", "1", "--speed", speed, "--sim-profile", "fast",
                       "--out-dir", str(tmp_path / "arms"), "--json", str(out))  # fmt: skip
    return done, out


def _measured(done: subprocess.CompletedProcess[str], data: dict) -> bool:
    """Whether every arm measured the model (exit 0). On a busy machine an arm's replay
    sends late (client-bound) or the simulator's steps run longer than modelled
    (simulator-bound): then the check must say so, row by row and in its last line, and
    exit 4 (not judged), and it compares no such arm. A consistency check: whether the
    arms were measured is the `perf` tests' to assert."""
    bound = [a for a in data["arms"] if a["client_bound"] or a["sim_bound"] or a["overloaded"]]
    if done.returncode == 0:
        assert not bound, data["arms"]
        return True
    assert done.returncode == 4 and bound, done.stderr
    kinds = sorted(
        {
            "client-bound" if a["client_bound"] else "simulator-bound" if a["sim_bound"]
            else "overloaded"
            for a in bound
        }
    )  # fmt: skip
    assert done.stderr.strip().splitlines()[-1] == (
        f"Error: {len(bound)} of {len(data['arms'])} arms were {' or '.join(kinds)}: "
        "the comparison is not a measure of the model; run on a less busy machine, with "
        "a lower --speed, or against a target sized for the load"
    )
    rows = [line for line in done.stdout.splitlines() if "-BOUND: " in line or "OVERLOADED" in line]
    assert len(rows) == len(bound), done.stdout
    print(f"{len(bound)} arms bound ({', '.join(kinds)}): their figures not compared")
    return False


def test_three_arms_are_replayed_and_compared(
    tmp_path: Path, trace: tuple[Path, Path, int]
) -> None:
    archive, model, n = trace
    done, out = _validate(tmp_path, archive, model, *UNBOUND)
    assert "Traceback" not in done.stderr and out.exists(), done.stderr
    data = json.loads(out.read_text())
    _measured(done, data)
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["exact", "model", "poisson"]
    arms = {(a["arm"], a["seed"]): a for a in data["arms"]}
    assert set(arms) == {("exact", None), ("model", 1), ("poisson", 1)}
    for arm in arms.values():
        assert arm["requests"] == n and arm["errors"] == 0
        p99, lo, hi = arm["latency"]["p99"]
        assert lo <= p99 <= hi and arm["latency"]["p50"][0] <= p99
        assert arm["ttft"]["p99"][0] <= p99
    # The model's arm is as bursty as the recording at 3 s; Poisson's is not.
    assert arms[("exact", None)]["idc"][0] > 2
    assert arms[("poisson", 1)]["idc"][0] < 1.6


@pytest.mark.perf
def test_three_arms_measured_are_compared(tmp_path: Path, trace: tuple[Path, Path, int]) -> None:
    archive, model, _ = trace
    # What the refusal tells a user on a busy machine, the test does too: a lower
    # --speed. CI's shared cores can slow the simulator's steps at 4x (26 req/s).
    for speed in ("4x", "2x", "1x"):
        (tmp_path / speed).mkdir()
        done, out = _validate(tmp_path / speed, archive, model, speed=speed)
        data = json.loads(out.read_text())
        if _measured(done, data):
            break
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[4].startswith("model: latency p99 error mean |")
    assert lines[5].startswith("poisson: latency p99 error mean |")
    assert len(data["errors"]["model"]["latency_p99"]) == 1


def test_several_held_out_windows_are_pooled_into_the_reference(
    tmp_path: Path, trace: tuple[Path, Path, int]
) -> None:
    archive, model, n = trace
    done, out = _validate(tmp_path, archive, model, "--windows", "2", "--window", "20s", *UNBOUND)
    assert out.exists(), done.stderr
    data = json.loads(out.read_text())
    measured = _measured(done, data)
    names = [" ".join(line.split()[:3]) for line in done.stdout.splitlines()[1:6]]
    assert names[:2] == ["exact window 1", "exact window 2"], names
    arms = {(a["arm"], a["seed"]): a for a in data["arms"]}
    first, second = arms[("exact", 1)], arms[("exact", 2)]
    pool = arms[("exact pooled", None)]
    assert first["requests"] + second["requests"] == pool["requests"] == n
    # A synthetic arm holds a part a window, as many requests as it and at its rate,
    # each part replayed on a fresh simulator as its window is.
    recorded = _starts(archive)
    for kind in ("model", "poisson"):
        assert arms[(kind, 1)]["requests"] == n
        names = [f"{kind}-1-w{k}-results.msgpack" for k in (1, 2)]
        assert arms[(kind, 1)]["results"] == names
        for k in (0, 1):
            lo = recorded[0] + k * 20 * 10**9
            span = min(lo + 20 * 10**9, recorded[-1] + 1) - lo
            held = int(((recorded >= lo) & (recorded < lo + 20 * 10**9)).sum())
            mine = _starts(tmp_path / "arms" / f"{kind}-1-w{k + 1}.msgpack")
            # Where its window starts, at its rate: n requests span (n - 1) / rate.
            assert mine.size == held and lo <= mine[0] < lo + 3 * 10**9
            assert mine[-1] - mine[0] == pytest.approx(span * (held - 1) / held, rel=1e-6)
    # The trace ends inside the second window (40 s of bins from its first request's
    # second): the window is what was recorded, and the run says so.
    end = (recorded[-1] + 1 - (recorded[0] + 20 * 10**9)) / 1e9
    warning = (
        f"warning: the archive ends {end:,.0f} s into window 2 of 20 s: that window is "
        f"the {end:,.0f} s recorded"
    )
    assert end < 20 and warning in done.stderr, done.stderr
    assert "exact pooled" not in data["errors"] and "exact" not in data["errors"]
    if measured:  # errors are against the pooled windows, not either one
        model_p99 = arms[("model", 1)]["latency"]["p99"][0]
        (err,) = data["errors"]["model"]["latency_p99"]
        assert err == pytest.approx(model_p99 / pool["latency"]["p99"][0] - 1)


def test_an_arm_the_client_could_not_keep_up_with_is_not_compared(
    tmp_path: Path, trace: tuple[Path, Path, int]
) -> None:
    archive, model, _ = trace
    # A lag limit of 0: every arm's dispatch lag is over it, as on a starved machine.
    done = _tailreplay("traces", "validate-model", str(archive), "--model", str(model),
                       "--seeds", "1", "--speed", "4x", "--sim-profile", "fast",
                       "--window", "10s", "--lag-limit", "0s",
                       "--out-dir", str(tmp_path / "arms"))  # fmt: skip
    assert done.returncode == 4
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: 3 of 3 arms were client-bound: the comparison is not a measure of the model; "
        "run on a less busy machine, with a lower --speed, or against a target sized for "
        "the load"
    )
    rows = done.stdout.splitlines()[1:4]
    assert all("CLIENT-BOUND: dispatch lag P99" in row for row in rows), rows
    assert "model: nothing to compare" in done.stdout


def test_an_arm_the_simulator_could_not_keep_its_model_for_is_not_compared() -> None:
    def arm(name: str, seed: int | None, p99: float, slowdown: float | None) -> ArmResult:
        three = {q: (p99, p99, p99) for q in ("p50", "p95", "p99")}
        return ArmResult(name, seed, 100, 0, latency=three, ttft=three, idc=[1.0, 1.0, 1.0],
                         lag_p99_ms=1.0, sim_slowdown=slowdown)  # fmt: skip

    exact, kept, slowed = (
        arm("exact", None, 1000, 0.01),
        arm("model", 1, 1100, 0.04),
        arm("model", 2, 3000, 0.30),
    )
    assert not kept.sim_bound and slowed.sim_bound and slowed.unmeasured
    assert errors([exact, kept, slowed])["model"]["latency_p99"] == [pytest.approx(0.1)]
    rows = render([exact, kept, slowed])
    assert rows[3].split() == ["model", "seed", "2", "100", "0", "0.0%", "SIMULATOR-BOUND:", "its",
                               "steps", "took", "30%", "longer", "than", "modelled;", "not",
                               "a", "measure", "of", "the", "model"]  # fmt: skip
    # A slowed exact arm leaves nothing to compare against.
    assert errors([arm("exact", None, 1000, 0.2), kept])["model"]["latency_p99"] == []


def test_an_arm_whose_target_failed_more_than_1_percent_is_not_compared() -> None:
    three = {q: (900.0, 900.0, 900.0) for q in ("p50", "p95", "p99")}

    def arm(name: str, seed: int | None, failed: int) -> ArmResult:
        return ArmResult(name, seed, 200, failed, latency=three, ttft=three, idc=[1.0] * 3,
                         lag_p99_ms=1.0)  # fmt: skip

    exact, fine, overloaded = arm("exact", None, 0), arm("model", 1, 2), arm("model", 2, 3)
    assert fine.error_rate == 0.01 and not fine.overloaded
    assert overloaded.overloaded and overloaded.unmeasured
    assert overloaded.why_unmeasured == "overloaded"
    assert errors([exact, fine, overloaded])["model"]["latency_p99"] == [0.0]
    rows = render([exact, fine, overloaded])
    assert "1.0%" in rows[2] and "OVERLOADED: 1.5% of its requests failed (over 1%)" in rows[3]


def test_a_target_that_refuses_requests_makes_every_arm_overloaded_exit_4(
    tmp_path: Path, trace: tuple[Path, Path, int]
) -> None:
    """End to end: simulators that take one request at a time (50 ms a token) and
    queue one more refuse the rest, so every arm fails far more than 1% of its
    requests: none is a measure of the model, and the run exits 4 (not judged),
    saying why."""
    archive, model, _ = trace
    done = _tailreplay("traces", "validate-model", str(archive), "--model", str(model),
                       "--seeds", "1", "--speed", "4x", "--sim-profile", "fast",
                       "--window", "10s", "--lag-limit", "1s",
                       "--sim-arg=--max-num-seqs=1", "--sim-arg=--queue-limit=1",
                       "--sim-arg=--decode-base-ms=50", "--json", str(tmp_path / "v.json"),
                       "--out-dir", str(tmp_path / "arms"))  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    data = json.loads((tmp_path / "v.json").read_text())
    assert len(data["arms"]) == 3 and all(a["overloaded"] for a in data["arms"]), data["arms"]
    # Each row and the last line name why (_measured): overloaded, or first what a busy
    # machine makes of 50 ms steps (simulator-bound) or of the sends (client-bound).
    assert not _measured(done, data)


def test_against_a_given_target_no_arm_is_served_from_anothers_cache(
    tmp_path: Path, trace: tuple[Path, Path, int]
) -> None:
    """One simulator with a prefix cache serves every arm in turn, as a given target
    does: the model's and Poisson's arms hold the same requests, so with the same
    prompts the second would find every prompt cached. Each arm draws its own."""
    from tailreplay.sim.launcher import sim_process

    archive, model, _ = trace
    flags = ["--seeds", "1", "--window", "10s", "--lag-limit", "1s"]
    with sim_process(["--profile", "fast"]) as url:
        flags += ["--target", url, "--out-dir", str(tmp_path / "arms")]
        done = _tailreplay("traces", "validate-model", str(archive), "--model", str(model), *flags)
    assert "Traceback" not in done.stderr
    results = sorted((tmp_path / "arms").glob("*-results.msgpack"))
    assert len(results) == 3, (results, done.stderr[-600:])
    for arm in results:
        answered = [r for r in ArchiveReader([arm]) if r.status == 200]
        cached = sum(r.cached_tokens or 0 for r in answered)
        assert answered and cached <= 0.05 * sum(r.input_tokens or 0 for r in answered), (
            arm.name,
            cached,
        )


def _starts(archive: Path) -> np.ndarray:
    return load_columns([archive], [])["start_ns"]


def _burst(tmp_path: Path, n: int, gap_ns: int, tokens: int) -> Path:
    maps = [{"start_ns": T0 + i * gap_ns, "input_tokens": 100, "output_tokens": tokens,
             "stream": True} for i in range(n)]  # fmt: skip
    return write_plain(tmp_path / f"a{n}.msgpack", maps)


def _replay(url: str, archive: Path, out: Path) -> None:
    from yarl import URL

    from tailreplay.studies.replay_args import ReplayArgs
    from tailreplay.studies.trial import replay_child

    replay_child(ReplayArgs(archives=(archive,), target=URL(url), out=out, fail_fast=0))


def _light_slowdown(tmp_path: Path) -> float | None:
    """The fast simulator's slowdown over a light replay (40 requests at 20/s)."""
    from tailreplay.sim.launcher import sim_process
    from tailreplay.studies.trial import sim_slowdown

    with sim_process(["--profile", "fast"]) as url:
        assert sim_slowdown(url) is None  # no step run yet
        _replay(url, _burst(tmp_path, 40, 50_000_000, 32), tmp_path / "r1.msgpack")
        return sim_slowdown(url)


def test_the_simulators_slowdown_is_read_from_its_own_step_counters(tmp_path: Path) -> None:
    """Far behind its model when its steps are modelled shorter than a Python loop runs
    one (as at a --speed too high for the machine), against a light load on the same
    machine just before; a target without the counters has none."""
    from tailreplay.sim.launcher import sim_process
    from tailreplay.studies.trial import SIM_SLOW_LIMIT, sim_slowdown

    light = _light_slowdown(tmp_path)
    tiny = [f"--{name}=0.001" for name in ("prefill-base-ms", "decode-base-ms")]
    tiny += [f"--{name}=0" for name in ("prefill-per-token-ms", "decode-per-seq-ms")]
    with sim_process(["--profile", "fast", *tiny]) as url:
        # All at once: every step runs a batch of hundreds, modelled at 2 µs.
        _replay(url, _burst(tmp_path, 600, 10_000, 64), tmp_path / "r2.msgpack")
        heavy = sim_slowdown(url)
    assert light is not None and heavy is not None
    print(f"slowdown: light {light:.1%}, heavy {heavy:.0%}")
    # Light, the machine's jitter is all it adds (a few percent; tens on a busy machine,
    # so that figure is the perf test below); too short, steps take several times
    # their model.
    assert 0 <= light < 1 and heavy > max(10 * SIM_SLOW_LIMIT, 2 * light)
    assert sim_slowdown("http://127.0.0.1:9") is None


@pytest.mark.perf
def test_a_lightly_loaded_simulator_keeps_to_its_model(tmp_path: Path) -> None:
    from tailreplay.studies.trial import SIM_SLOW_LIMIT

    light = _light_slowdown(tmp_path)
    assert light is not None and 0 <= light < SIM_SLOW_LIMIT


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "http://127.0.0.1:9", "--speed", "2x"], "with --target it would"),
        (["--sim-arg", "max-num-seqs=4"], "--sim-arg takes --NAME=VALUE"),
        (["--seeds", "0"], "Invalid value for '--seeds'"),
        (["--windows", "2"], "--windows needs --window: the length of each"),
        (["--sim-arg=--decode-base-ms=fast"], "--sim-arg --decode-base-ms=fast: not a number"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(
    tmp_path: Path, trace: tuple[Path, Path, int], args: list[str], message: str
) -> None:
    archive, model, _ = trace
    done = _tailreplay("traces", "validate-model", str(archive), "--model", str(model), *args,
                       "--out-dir", str(tmp_path / "arms"))  # fmt: skip
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_seeds_are_pooled_into_the_models_prediction(tmp_path: Path) -> None:
    # Two seeds' results, one with a slow tail: the pooled P99 is the P99 of both
    # seeds' requests together, not either seed's nor their mean.
    rng = np.random.default_rng(3)
    latencies = {1: rng.uniform(100, 200, 500), 2: np.append(rng.uniform(100, 200, 490),
                                                             np.full(10, 5000.0))}  # fmt: skip
    arms = [ArmResult("exact", None, 1000, 0)]
    for seed, ms in latencies.items():
        maps = [{"start_ns": T0 + i * 10**7, "duration_ns": round(v * 1e6), "status": 200,
                 "sent_ns": T0 + i * 10**7, "stream": False} for i, v in enumerate(ms)]  # fmt: skip
        write_plain(tmp_path / f"model-{seed}-results.msgpack", maps)
        arm = ArmResult("model", seed, len(ms), 0, lag_p99_ms=1.0 + seed)
        arms.append(replace(arm, results=[f"model-{seed}-results.msgpack"]))
    (pool,) = pooled(arms, tmp_path)
    assert pool.arm == "model pooled" and pool.seed is None and pool.requests == 1000
    both = np.concatenate(list(latencies.values()))
    assert pool.latency["p99"][0] == pytest.approx(np.percentile(both, 99), rel=1e-3)
    assert pool.lag_p99_ms == 3.0 and not pool.client_bound


def _arm(arm: str, p99: float, half: float, seed: int | None = None) -> ArmResult:
    latency = {"p50": (p99 / 3, 0.0, 0.0), "p95": (p99 / 2, 0.0, 0.0)}
    latency["p99"] = (p99, p99 - half, p99 + half)
    return ArmResult(arm, seed, 1_000, 0, latency=latency, idc=[1.0, 1.0, 1.0])


def test_one_window_that_cannot_rank_the_models_says_so() -> None:
    # The held-out P99 is known to ±50%: a model 20% off and Poisson 30% off are a tie.
    tie = [_arm("exact", 1000.0, 500.0), _arm("model", 1200.0, 50.0, 1)]
    tie.append(_arm("poisson", 1300.0, 50.0, 1))
    line = ranking_line(tie)
    assert line is not None and line.startswith("one window cannot rank the models: ")
    assert "(±50%); replay more of them (--windows 4)" in line
    assert line in render(tie)
    clear = [_arm("exact", 1000.0, 20.0), _arm("model", 1050.0, 50.0, 1)]
    clear.append(_arm("poisson", 1500.0, 50.0, 1))
    assert ranking_line(clear) == (
        "ranked on one window: the model is closer on latency P99 (|5%| against |50%|)"
    )


def test_each_arm_says_what_it_found_in_the_prefix_cache(tmp_path: Path) -> None:
    # Every prompt starts with the same two 512-token blocks (a system prompt) and
    # goes on with blocks of its own: each arm's requests find those 1,024 tokens in
    # the simulator's prefix cache, the synthetic arms through the model's prefixes.
    rng = np.random.default_rng(6)
    times = np.sort(rng.random(320) * 40.0)
    maps = []
    for k, t in enumerate(times):
        blocks = int(rng.integers(3, 7))
        own = range(100 * k + 3, 100 * k + blocks + 1)
        maps.append(
            {
                "start_ns": T0 + round(t * 1e9),
                "input_tokens": 512 * blocks,
                "output_tokens": int(rng.integers(4, 12)),
                "stream": True,
                "prefix_hashes": [1, 2, *own],
            }
        )
    archive = write_plain(tmp_path / "a.msgpack", maps)
    model = tmp_path / "m.json"
    assert _tailreplay("traces", "fit", str(archive), "-o", str(model)).returncode == 0
    done, out = _validate(tmp_path, archive, model, *UNBOUND)
    assert out.exists(), done.stderr
    assert done.stdout.splitlines()[0].split()[-1] == "cached"
    for arm in json.loads(out.read_text())["arms"]:
        assert 1_000 <= arm["cached_tokens"] <= 1_100, arm


def test_the_synthetic_arms_draw_the_recent_halfs_lengths_when_asked(tmp_path: Path) -> None:
    # A recording whose prompts shrink from a mean of 600 tokens to 400 halfway.
    archive = drifting_lengths(tmp_path / "a.msgpack")
    model = tmp_path / "m.json"
    assert _tailreplay("traces", "fit", str(archive), "-o", str(model)).returncode == 0
    window = _Window(archive, T0, 500.0, 10_000)
    means = {}
    for which in ("all", "recent"):
        cfg = CheckConfig(archive, Workload.load(model), tmp_path / which, lengths=which)
        cfg.out_dir.mkdir()
        (path,) = _synthesized(cfg, [window], "model", 1)
        means[which] = np.mean([r.input_tokens for r in ArchiveReader([path])])
    assert means["all"] == pytest.approx(500, rel=0.05)
    assert means["recent"] == pytest.approx(400, rel=0.05)


def test_recent_lengths_from_a_model_without_them_is_one_line_before_any_arm(
    tmp_path: Path, trace: tuple[Path, Path, int]
) -> None:
    archive, fitted, _ = trace
    m = json.loads(fitted.read_text())
    m["recent_lengths"] = None  # as a recording too short to split into halves leaves it
    model = tmp_path / "m.json"
    model.write_text(json.dumps(m))
    done = _tailreplay("traces", "validate-model", str(archive), "--model", str(model),
                       "--lengths", "recent", "--out-dir", str(tmp_path / "arms"))  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: the model has no lengths of its recent half (its recording is too short to "
        "split); use --lengths all"
    )
    assert not list((tmp_path / "arms").glob("*.msgpack"))
