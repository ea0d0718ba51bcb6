"""The raw export: every request's times, from which the report's figures follow."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.sim.launcher import sim_process
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9


def _archive(path: Path, n: int) -> None:
    rng = random.Random(3)
    write_plain(
        path,
        [
            {
                "start_ns": T0 + round(rng.uniform(0, 3) * 1e9),
                "trace_id": rng.randbytes(16),
                "span_id": rng.randbytes(8),
                "method": "POST" if i % 10 else "GET",
                "path": "/v1/chat/completions" if i % 10 else "/v1/models",
                "model": "m",
                "stream": i % 3 != 0,
                "input_tokens": rng.randint(20, 400),
                "output_tokens": rng.randint(2, 40),
                "duration_ns": rng.randint(10**8, 10**9),
            }
            for i in range(n)
        ],
    )


def test_the_raw_export_recomputes_the_reports_percentiles(tmp_path: Path) -> None:
    archive, out = tmp_path / "a.msgpack", tmp_path / "r.msgpack"
    _archive(archive, 120)
    with sim_process(["--profile", "fast"]) as sim:
        replayed = CliRunner().invoke(
            cli,
            ["replay", "--target", sim, "--out", str(out), "--json", str(tmp_path / "s.json"),
             str(archive)],
        )  # fmt: skip
    assert replayed.exit_code == 0, replayed.output
    raw, report = tmp_path / "raw.jsonl", tmp_path / "report.json"
    done = CliRunner().invoke(cli, ["traces", "export", "raw", str(out), "-o", str(raw)])
    assert done.exit_code == 0 and "exported 120 requests" in done.stderr, done.output
    assert raw.stat().st_mode & 0o777 == 0o600
    assert CliRunner().invoke(cli, ["report", str(out), "--json", str(report)]).exit_code == 0
    lines = [json.loads(line) for line in raw.read_text().splitlines()]
    figures = json.loads(report.read_text())["overall"]["replayed"]["metrics"]
    judged = [r for r in lines if r["generates"] and not r["failed"]]
    assert len(judged) == 108 and len(lines) == 120  # 12 model lists: in no figure
    latency = np.array([r["latency_ms"] for r in judged])
    ttft = np.array([r["ttft_ms"] for r in judged if r["ttft_ms"] is not None])
    ttst = np.array(
        [(r["second_token_ns"] - r["start_ns"]) / 1e6 for r in judged if r["second_token_ns"]]
    )
    for q in ("p50", "p99"):
        at = float(q[1:])
        # The same values and arithmetic, up to the last bit of a float's rounding.
        assert np.percentile(latency, at) == pytest.approx(
            figures["latency"][q]["value"], rel=1e-12
        )
        assert np.percentile(ttft, at) == pytest.approx(figures["ttft"][q]["value"], rel=1e-12)
        assert np.percentile(ttst, at) == pytest.approx(figures["ttst"][q]["value"], rel=1e-12)
    # Inter-token gaps from the token times; the report's come from 1%-wide bins.
    gaps = np.concatenate([np.diff(r["token_ns"]) / 1e6 for r in judged if r["stream"]])
    for q in ("p50", "p99"):
        assert abs(np.percentile(gaps, float(q[1:])) / figures["itl"][q]["value"] - 1) < 0.01
    # The summary's ITL and P99.9 are the report's.
    summary = json.loads((tmp_path / "s.json").read_text())
    for q in ("p50", "p99", "p999"):
        assert summary["itl_ms"][q] == pytest.approx(figures["itl"][q]["value"], rel=1e-12)
        assert summary["latency_ms"][q] == pytest.approx(figures["latency"][q]["value"], rel=1e-12)
    assert "ITL" in replayed.stdout and "p99.9" in replayed.stdout
    for r in judged:
        assert r["due_ns"] is not None and r["sent_ns"] >= r["due_ns"] - 10**9
        if r["stream"]:  # the simulator sends a token an event
            assert len(r["token_ns"]) == r["output_tokens"]
            assert (
                r["token_ns"][0] == r["first_token_ns"] and r["token_ns"][1] == r["second_token_ns"]
            )
            assert r["start_ns"] < r["first_token_ns"] <= r["token_ns"][-1] <= r["end_ns"]
        else:
            assert r["token_ns"] == [] and r["ttft_ms"] is None
