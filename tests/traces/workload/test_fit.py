"""``traces fit`` and ``traces synth``: known parameters recovered, synthesis at a new
rate and length, a real public trace fitted and its synthesis replayed."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import DATA, drifting_lengths, write_plain

T0 = 1_700_000_000 * 10**9
AZURE = DATA / "azure_llm_2023"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["traces", *args])
    return result.exit_code, result.stdout, result.stderr


def _known(path: Path, n: int = 20_000) -> Path:
    """Weibull(0.6) arrivals at 20 req/s; Gamma(2, 300) input and Gamma(1.5, 80) output."""
    rng = np.random.default_rng(11)
    k = 0.6
    gaps = rng.weibull(k, n) / 20 / math.gamma(1 + 1 / k)
    starts = T0 + np.cumsum(gaps * 1e9).astype(np.int64)
    inputs = np.ceil(rng.gamma(2.0, 300.0, n)).astype(int)
    outputs = np.ceil(rng.gamma(1.5, 80.0, n)).astype(int)
    maps = [
        {
            "start_ns": int(s), "trace_id": rng.bytes(16), "span_id": rng.bytes(8),
            "path": "/v1/chat/completions", "model": "big" if i % 4 else "small",
            "stream": i % 5 != 0, "input_tokens": int(a), "output_tokens": int(b),
        }
        for i, (s, a, b) in enumerate(zip(starts, inputs, outputs, strict=True))
    ]  # fmt: skip
    return write_plain(path, maps)


def test_fit_recovers_known_parameters(tmp_path: Path) -> None:
    archive = _known(tmp_path / "a.msgpack")
    model = tmp_path / "m.json"
    code, out, err = _run("fit", str(archive), "-o", str(model))
    assert code == 0, err
    assert "timestamps are not quantised" in out and "burstiness (index of dispersion" in out
    assert stat.S_IMODE(os.stat(model).st_mode) == 0o600
    m = json.loads(model.read_text())
    renewal = m["arrivals"]["renewal"]
    assert renewal["family"] == "weibull" and renewal["shape"] == pytest.approx(0.6, rel=0.05)
    assert m["arrivals"]["renewal_other"]["family"] == "gamma"
    assert renewal["loglik"] > m["arrivals"]["renewal_other"]["loglik"]
    assert m["rate_rps"] == pytest.approx(20, rel=0.05)
    assert m["lengths"]["ks_input"] < 0.03 and m["lengths"]["ks_output"] < 0.03
    assert m["stream_share"] == pytest.approx(0.8)
    assert m["models"] == {"big": 0.75, "small": 0.25}
    assert m["arrivals"]["kind"] == "renewal"  # Weibull gaps: it reproduces the burstiness
    assert not any("Poisson" in w or "length" in w for w in m["warnings"]), m["warnings"]
    assert "lengths, first half -> second: mean input tokens" in out and "within noise" in out
    # The lengths come back: Gamma(2, 300) has mean 600, Gamma(1.5, 80) 120.
    synth = tmp_path / "s.msgpack"
    assert _run("synth", str(model), "-o", str(synth), "--count", "20000")[0] == 0
    records = list(ArchiveReader([synth]))
    assert np.mean([r.input_tokens for r in records]) == pytest.approx(600, rel=0.04)
    assert np.mean([r.output_tokens for r in records]) == pytest.approx(120, rel=0.04)


def test_a_drift_of_the_length_mix_is_reported_and_its_recent_half_drawn(
    tmp_path: Path,
) -> None:
    archive = drifting_lengths(tmp_path / "a.msgpack")
    model = tmp_path / "m.json"
    code, out, err = _run("fit", str(archive), "-o", str(model))
    assert code == 0, err
    said = re.search(r"mean input tokens ([\d,]+) -> ([\d,]+) \(([-+]\d+)%, noise ±(\d+)%\)", out)
    assert said is not None, out
    first, second = (int(said[k].replace(",", "")) for k in (1, 2))
    assert first == pytest.approx(600, rel=0.04) and second == pytest.approx(400, rel=0.04)
    assert int(said[3]) == pytest.approx(-33, abs=3) and int(said[4]) < 10
    assert "the halves differ beyond their noise" in out
    assert "`synth --lengths recent`" in err  # the warning, where a script sees it
    m = json.loads(model.read_text())
    assert m["length_drift"]["input_means"] == pytest.approx([600, 400], rel=0.04)
    means = {}
    for which in ("all", "recent"):
        synth = tmp_path / f"{which}.msgpack"
        args = ["synth", str(model), "-o", str(synth), "--count", "20000", "--lengths", which]
        assert _run(*args)[0] == 0
        means[which] = np.mean([r.input_tokens for r in ArchiveReader([synth])])
    assert means["all"] == pytest.approx(500, rel=0.05)
    assert means["recent"] == pytest.approx(400, rel=0.05)


def test_a_model_with_malformed_recent_lengths_is_refused_in_one_line(tmp_path: Path) -> None:
    archive = drifting_lengths(tmp_path / "a.msgpack", n=2_000)
    model = tmp_path / "m.json"
    assert _run("fit", str(archive), "-o", str(model))[0] == 0
    m = json.loads(model.read_text())
    m["recent_lengths"]["weights"] = [2.0]
    model.write_text(json.dumps(m))
    code, _, err = _run("synth", str(model), "-o", str(tmp_path / "s.msgpack"), "--count", "5")
    assert code == 3
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            "malformed workload model (recent_lengths.weights must be 1 to 8 shares summing to 1)"
        )
    )


def test_synth_at_a_new_rate_and_length_keeps_the_shape(tmp_path: Path) -> None:
    model = tmp_path / "m.json"
    assert _run("fit", str(_known(tmp_path / "a.msgpack")), "-o", str(model))[0] == 0
    out = tmp_path / "s.msgpack"
    code, _, err = _run("synth", str(model), "-o", str(out), "--duration", "5m", "--scale", "3x",
                        "--seed", "4")  # fmt: skip
    assert code == 0, err
    records = list(ArchiveReader([out]))
    assert len(records) == pytest.approx(3 * 20 * 300, rel=0.08)
    assert f"wrote {len(records):,} records to {out}" in err
    starts = np.array([r.start_ns for r in records])
    assert (starts[-1] - starts[0]) / 1e9 <= 300
    assert bool(np.all(np.diff(starts) >= 0))
    fitted = json.loads(model.read_text())
    max_in = fitted["lengths"]["max_input"]
    assert all(1 <= (r.input_tokens or 0) <= max_in for r in records)
    # Fitting the synthetic trace gives back the burstiness and a rate three times over.
    again = tmp_path / "again.json"
    assert _run("fit", str(out), "-o", str(again))[0] == 0
    m2 = json.loads(again.read_text())
    assert m2["rate_rps"] == pytest.approx(60, rel=0.08)
    # at 3 s (five minutes hold too few longer windows to estimate)
    idc = fitted["arrivals"]["burstiness"]["recorded"]
    idc2 = m2["arrivals"]["burstiness"]["recorded"]
    assert idc2[0] == pytest.approx(idc[0], rel=0.25)
    # Same seed, same requests; --count bounds it exactly.
    out2 = tmp_path / "s2.msgpack"
    assert _run("synth", str(model), "-o", str(out2), "--duration", "5m", "--scale", "3x",
                "--seed", "4")[0] == 0  # fmt: skip
    assert [r.to_map() for r in ArchiveReader([out2])] == [r.to_map() for r in records]
    assert _run("synth", str(model), "-o", str(out2), "--count", "500")[0] == 0
    assert len(list(ArchiveReader([out2]))) == 500


def test_a_rate_curve_is_kept_apart_from_burstiness(tmp_path: Path) -> None:
    # Poisson arrivals (shape 1) at 10/s for ten minutes, then 40/s for ten more.
    rng = np.random.default_rng(5)
    quiet = np.cumsum(rng.exponential(1 / 10, 7000))
    busy = 600 + np.cumsum(rng.exponential(1 / 40, 26000))
    times = np.concatenate([quiet[quiet < 600], busy[busy < 1200]])
    maps = [{"start_ns": T0 + int(t * 1e9), "trace_id": rng.bytes(16), "span_id": rng.bytes(8),
             "input_tokens": 100, "output_tokens": 10} for t in times]  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", maps)
    flat_model, curve_model = tmp_path / "flat.json", tmp_path / "curve.json"
    assert _run("fit", str(archive), "-o", str(flat_model))[0] == 0
    code, out, err = _run("fit", str(archive), "-o", str(curve_model), "--profile", "1m")
    assert code == 0, err
    assert "rate curve: 20 bins of 60 s, 0.3" in out
    flat, curve = json.loads(flat_model.read_text()), json.loads(curve_model.read_text())
    # Fitted flat, the rush looks like burstiness; with the curve, it is Poisson again.
    assert flat["arrivals"]["renewal"]["shape"] < 0.9
    assert curve["arrivals"]["renewal"]["shape"] == pytest.approx(1.0, abs=0.05)
    profile = curve["arrivals"]["rate_profile"]
    assert profile[:10] == pytest.approx([0.4] * 10, abs=0.05)
    assert profile[10:] == pytest.approx([1.6] * 10, abs=0.1)

    def per_10m(path: Path) -> Any:
        starts = np.array([r.start_ns for r in ArchiveReader([path])]) - T0
        return np.histogram(starts / 1e9, bins=[0, 600, 1200, 1800, 2400])[0]

    synth = tmp_path / "s.msgpack"
    args = [
        "synth",
        str(curve_model),
        "-o",
        str(synth),
        "--duration",
        "40m",
        "--start",
        "1700000000",
    ]
    assert _run(*args)[0] == 0
    counts = per_10m(synth)
    # The curve repeats: quiet, busy, quiet, busy, at 4x between them.
    assert counts[1] / counts[0] == pytest.approx(4, rel=0.15)
    assert counts[3] / counts[2] == pytest.approx(4, rel=0.15)
    assert counts.sum() / 2400 == pytest.approx(curve["rate_rps"], rel=0.05)
    assert _run(*args, "--flat")[0] == 0
    counts = per_10m(synth)
    assert counts.max() / counts.min() == pytest.approx(1, abs=0.15)
    code, _, err = _run("fit", str(archive), "-o", str(curve_model), "--profile", "1h")
    assert code == 2 and "not shorter than the recording" in err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--count", "5", "--rate", "1", "--scale", "2x"], 2, "not both"),
        ([], 2, "give --count or --duration"),
        (["--count", "5", "--scale", "fast"], 2, "invalid --scale"),
    ],
)
def test_synth_bad_options(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    model = tmp_path / "m.json"
    assert _run("fit", str(_known(tmp_path / "a.msgpack", 200)), "-o", str(model))[0] == 0
    got, _, err = _run("synth", str(model), "-o", str(tmp_path / "s.msgpack"), *args)
    assert got == code and message in err, err


def test_bad_inputs_exit_3_with_one_line(tmp_path: Path) -> None:
    not_json = tmp_path / "m.json"
    not_json.write_text("{nope")
    code, _, err = _run("synth", str(not_json), "-o", str(tmp_path / "s.msgpack"), "--count", "5")
    assert code == 3 and "not a workload model" in err and len(err.strip().splitlines()) == 1
    other = tmp_path / "o.json"
    other.write_text('{"format": "something else"}')
    code, _, err = _run("synth", str(other), "-o", str(tmp_path / "s.msgpack"), "--count", "5")
    assert code == 3 and "not a tailreplay workload model" in err
    tiny = write_plain(tmp_path / "t.msgpack", [{"start_ns": T0 + i} for i in range(3)])
    code, _, err = _run("fit", str(tiny), "-o", str(tmp_path / "m2.json"))
    assert code == 3 and "too few to fit" in err


def test_a_real_trace_fits_and_its_synthesis_replays(tmp_path: Path) -> None:
    csv = sorted(AZURE.glob("*code*.csv"))[0]
    archive = tmp_path / "azure.msgpack"
    runner = CliRunner()
    result = runner.invoke(cli, ["traces", "import", "azure", str(csv), "-o", str(archive)])
    assert result.exit_code == 0, result.stderr
    model = tmp_path / "m.json"
    code, _, err = _run("fit", str(archive), "-o", str(model))
    assert code == 0, err
    m = json.loads(model.read_text())
    # Azure's code trace is bursty (CV of gaps 13): a model that keeps it, and lengths
    # (multimodal: a Gamma had KS 0.26 here) that fit.
    assert m["arrivals"]["kind"] in ("renewal", "mmpp")
    burst = m["arrivals"]["burstiness"]
    recorded, model_idc = burst["recorded"], burst["model"]
    assert recorded[1] > 5 and model_idc[1] > 1
    assert m["lengths"]["ks_input"] < 0.1 and m["lengths"]["ks_output"] < 0.1
    synth = tmp_path / "s.msgpack"
    assert _run("synth", str(model), "-o", str(synth), "--count", "2000", "--scale", "2x")[0] == 0
    result = runner.invoke(
        cli, ["replay", "--dry-run", str(synth), "--out", str(tmp_path / "d.msgpack")]
    )
    assert result.exit_code == 0, result.stderr
    assert len(list(ArchiveReader([tmp_path / "d.msgpack"]))) == 2000


def test_fixed_lengths_and_even_spacing_fit_as_point_masses(tmp_path: Path) -> None:
    # A benchmark's archive: one request every 100 ms, always 100 tokens in, 10 out.
    maps = [{"start_ns": T0 + i * 10**8, "input_tokens": 100, "output_tokens": 10}
            for i in range(500)]  # fmt: skip
    model = tmp_path / "m.json"
    code, _, err = _run("fit", str(write_plain(tmp_path / "a.msgpack", maps)), "-o", str(model))
    assert code == 0, err  # scipy's optimiser has no optimum here; this must not crash
    out = tmp_path / "s.msgpack"
    assert _run("synth", str(model), "-o", str(out), "--count", "200")[0] == 0
    records = list(ArchiveReader([out]))
    assert {(r.input_tokens, r.output_tokens) for r in records} == {(100, 10)}
    gaps = np.diff([r.start_ns for r in records]) / 1e6
    assert gaps.min() == pytest.approx(100, abs=0.5) and gaps.max() == pytest.approx(100, abs=0.5)
