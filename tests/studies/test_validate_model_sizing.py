"""``traces validate-model`` on the built-in simulator sizes it to the held-out window:
an engine the window overloads would give every arm the same queue-bound P99, and a
comparison of models on it would mean nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tailreplay.sim.profiles import profile
from tailreplay.studies.target_setup import SERVED_LOAD, serving_factor
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9


def test_an_engine_that_serves_a_load_is_kept_as_it_is() -> None:
    fast = profile("fast")
    light = fast.capacity_rps(500, 50) * SERVED_LOAD * 0.5
    assert serving_factor("fast", 1_000, light, (500, 50)) == 1.0


def test_a_load_over_the_engine_gets_steps_as_much_faster_as_it_needs() -> None:
    # 20 req/s of 8,000-token prompts: the fast profile serves about 9 a second (104 ms
    # of prefill each, and 40 tokens at 8.4 ms a step of 59 sequences, all the KV holds).
    capacity = profile("fast").capacity_rps(8_000, 40)
    assert capacity == pytest.approx(9.12, rel=0.01)
    factor = serving_factor("fast", 10_000, 20.0, (8_000, 40))
    assert factor == pytest.approx(20.0 / (SERVED_LOAD * capacity))
    # Twice the load, twice as fast.
    assert serving_factor("fast", 10_000, 40.0, (8_000, 40)) == pytest.approx(2 * factor)


def test_capacity_follows_the_kv_budget_when_it_holds_fewer_than_the_sequence_limit() -> None:
    fast = profile("fast")  # 480,000 KV tokens, 256 sequences
    few = fast.capacity_rps(40_000, 400)  # 11 sequences fit
    assert few < fast.with_overrides(kv_tokens=256 * 40_400).capacity_rps(40_000, 400)


def test_a_window_that_overloads_the_profile_is_replayed_on_a_sized_simulator(
    tmp_path: Path,
) -> None:
    # 20 req/s of 6,000-10,000-token prompts for a minute; the held-out window is its
    # first 10 s. On the fast profile as it is, every arm queues for the whole window
    # (latency P99 15.4 s, 0 errors: a queue, not a refusal) and the arms agree to
    # within 3%, which says nothing of the models.
    rng = np.random.default_rng(3)
    times = np.sort(rng.random(1_200) * 60.0)
    maps = [
        {
            "start_ns": T0 + round(t * 1e9),
            "input_tokens": int(rng.integers(6_000, 10_000)),
            "output_tokens": int(rng.integers(20, 60)),
            "stream": True,
        }
        for t in times
    ]
    archive = write_plain(tmp_path / "heavy.msgpack", maps)
    model = tmp_path / "m.json"
    fit = [sys.executable, "-m", "tailreplay", "traces", "fit", str(archive), "-o", str(model)]
    fitted = subprocess.run(fit, capture_output=True, text=True, check=False)
    assert fitted.returncode == 0, fitted.stderr
    out = tmp_path / "v.json"
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "traces", "validate-model", str(archive),
         "--model", str(model), "--seeds", "1", "--sim-profile", "fast", "--window", "10s",
         "--out-dir", str(tmp_path / "arms"), "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    sized = re.search(r"simulator: profile fast with its steps ([\d.]+)x as fast", said)
    assert sized is not None, said
    assert float(sized[1]) == pytest.approx(2.8, abs=0.2)
    arms = {a["arm"]: a for a in json.loads(out.read_text())["arms"]}
    exact = arms["exact"]
    assert exact["errors"] == 0
    # Served: the P99 is a fraction of the 10 s window, not the queue's whole length.
    assert exact["latency"]["p99"][0] < 7_500, exact["latency"]
