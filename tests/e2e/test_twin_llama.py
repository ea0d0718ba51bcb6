"""The twin against a real engine, reduced from ``bench/twin.py`` to six minutes: llama.cpp's
own server (4 slots, the tiny gemma model) serves a recorded window at the
calibration load L and at 0.5L and 1.5L; ``sim calibrate`` fits a profile from the
replay at L; the twin serves the same window offline at each load, and its figures
are held to the server's. Run by `make e2e-llama`; skipped elsewhere, and not in CI:
on a shared 2-core machine the server's own speed moves between its replays by more
than these bounds (docs/simulator.md, "Against llama.cpp's server").

The window is 35 requests over 90 s, where the bench's is 100 over 300 s, so a
P99 here is the largest request or so and a P50 a handful: the bounds are the
issue's targets widened by what the server itself moves between two replays of one
window on a shared 2-core machine (about a fifth at P99 on 55 requests). The means,
which a few requests cannot swing, are held tighter. The bench prints the figures at
the targets (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.results.figures import metric_values
from tailreplay.traces.results.stats import STATS_FIELDS, STATS_PRESENCE, requests
from tests.helpers import free_port, ramping_window, served

MODEL = os.environ.get("TAILREPLAY_E2E_MODEL")
SERVER = os.environ.get("TAILREPLAY_LLAMA_SERVER")
pytestmark = pytest.mark.skipif(not (MODEL and SERVER), reason="set by `make e2e-llama`")

SLOTS = 4
PROMPT_MAX = 400
LOADS = (0.5, 1.0, 1.5)
P50_WITHIN, P99_WITHIN, MEAN_WITHIN = 0.35, 0.5, 0.2


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    cmd = [str(SERVER), "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--parallel", str(SLOTS), "--ctx-size", str(SLOTS * (PROMPT_MAX + 128))]
    cmd += ["--metrics", "-t", "2"]
    with served(cmd, f"http://127.0.0.1:{port}", "/health", log) as url:
        yield url


def _replay(window: Path, out: Path, load: float, target: list[str]) -> None:
    """The window at ``load``, its prompts drawn on a seed of the load's own (the server
    keeps its prefix cache from one load to the next; each twin starts empty)."""
    cmd = [sys.executable, "-m", "tailreplay", "replay", str(window), *target]
    cmd += ["--speed", f"{load:g}x", "--out", str(out), "--tail-stretch", "1"]
    cmd += ["--seed", str(round(load * 1000)), "--lag-limit", "1h"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-800:]


def _figures(results: Path) -> dict[str, tuple[float, float, float]]:
    """P50, P99 and mean (ms) of TTFT and latency."""
    cols = load_columns([results], list(STATS_FIELDS), presence_only=STATS_PRESENCE)
    values = metric_values(requests(cols))
    return {
        name: (*np.percentile(values[name], [50, 99]), float(np.mean(values[name])))
        for name in ("ttft", "latency")
    }


def test_a_twin_calibrated_on_llama_server_predicts_it_at_other_loads(
    tmp_path: Path, llama: str
) -> None:
    window = tmp_path / "window.msgpack"
    n = ramping_window(window, 90, 0.6, 11, rate_from=0.1, prompt_max=PROMPT_MAX)
    assert n >= 30, n  # what a calibration needs
    real = {}
    for load in LOADS:
        _replay(window, tmp_path / f"real-{load:g}.msgpack", load, ["--target", llama])
        real[load] = _figures(tmp_path / f"real-{load:g}.msgpack")

    profile = tmp_path / "twin.json"
    calibrate = [sys.executable, "-m", "tailreplay", "sim", "calibrate"]
    calibrate += [str(tmp_path / "real-1.msgpack"), "-o", str(profile)]
    done = subprocess.run(calibrate, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-800:]
    fitted = json.loads(profile.read_text())
    assert fitted["calibration"]["requests"] == n and fitted["calibration"]["failed"] == 0
    assert fitted["calibration"]["streamed"] == n

    errors = []
    for load in LOADS:
        out = tmp_path / f"twin-{load:g}.msgpack"
        slots = f"--sim-arg=--max-num-seqs={SLOTS}"
        _replay(window, out, load, [f"--sim-arg=--profile={profile}", "--offline", slots])
        twin = _figures(out)
        for name in ("ttft", "latency"):
            for k, (what, within) in enumerate(
                (("P50", P50_WITHIN), ("P99", P99_WITHIN), ("mean", MEAN_WITHIN))
            ):
                error = twin[name][k] / real[load][name][k] - 1
                if abs(error) > within:
                    errors.append(f"{load:g}x {name} {what}: {error:+.0%}")
    table = {load: {k: [round(v) for v in f] for k, f in real[load].items()} for load in LOADS}
    assert not errors, (errors, table)
