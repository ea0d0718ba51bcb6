"""Telemetry must not change a replay: a dead or slow OTLP endpoint, and /metrics."""

from __future__ import annotations

import json
import random
import re
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.sim.launcher import sim_process
from tests.helpers import free_port, write_plain
from tests.otlp_receiver import receiver_in_thread

T0 = 1_700_000_000 * 10**9


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with sim_process(["--profile", "fast", "--max-num-seqs", "512"]) as url:
        yield url


def _archive(path: Path, n: int, rate: float) -> None:
    rng = random.Random(2)
    t = 0.0
    maps = []
    for _ in range(n):
        t += rng.expovariate(rate)
        maps.append(
            {
                "start_ns": T0 + round(t * 1e9),
                "trace_id": rng.randbytes(16),
                "span_id": rng.randbytes(8),
                "method": "POST",
                "path": "/v1/chat/completions",
                "model": "m",
                "stream": True,
                "input_tokens": rng.randint(20, 200),
                "output_tokens": rng.randint(2, 6),
                "duration_ns": rng.randint(10**8, 10**9),
            }
        )
    write_plain(path, maps)


def _replay(tmp_path: Path, target: str, name: str, *extra: str) -> tuple[int, str, dict]:
    result = CliRunner().invoke(
        cli,
        [
            "replay", str(tmp_path / "a.msgpack"), "--target", target,
            "--out", str(tmp_path / f"{name}.msgpack"), "--json", str(tmp_path / f"{name}.json"),
            *extra,
        ],
    )  # fmt: skip
    summary = json.loads((tmp_path / f"{name}.json").read_text()) if result.exit_code == 0 else {}
    return result.exit_code, result.stderr, summary


@pytest.mark.parametrize("endpoint", ["dead", "slow"])
def test_a_dead_or_slow_otlp_endpoint_changes_nothing_that_matters(
    tmp_path: Path, sim: str, endpoint: str
) -> None:
    _archive(tmp_path / "a.msgpack", 400, rate=100)
    code, err, plain = _replay(tmp_path, sim, "plain")
    assert code == 0, err
    with receiver_in_thread() as otlp:
        otlp.delay_s = 30.0  # slow: accepts, then never answers within the timeout
        url = "http://127.0.0.1:9/v1/traces" if endpoint == "dead" else otlp.url
        code, err, traced = _replay(
            tmp_path, sim, "traced", "--otlp-endpoint", url, "--otlp-timeout", "1s"
        )
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: OTLP")]
    assert len(warnings) == 1, err
    assert "Traceback" not in err
    assert traced["completed"] == plain["completed"] == 400
    # Lag P99 within noise of the run without telemetry (1-2 ms on a quiet machine;
    # tens under a load average of 7). An export that blocked the dispatch loop would
    # hold the requests behind it for the whole --otlp-timeout (1 s): far past this.
    assert traced["lag_ms"]["p99"] <= plain["lag_ms"]["p99"] + 100, (plain, traced)
    assert re.search(r"spans: 0 exported to .*, 400 not delivered", err), err


def test_replay_serves_prometheus_metrics_while_it_runs(tmp_path: Path, sim: str) -> None:
    _archive(tmp_path / "a.msgpack", 300, rate=100)
    port = free_port()
    scraped: list[str] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.wait(0.2):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    scraped.append(r.read().decode())
            except OSError:
                pass

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    code, err, _ = _replay(
        tmp_path, sim, "m", "--metrics-listen", f"127.0.0.1:{port}", "--metrics-linger", "2s"
    )
    done.set()
    assert code == 0, err
    assert f"metrics on http://127.0.0.1:{port}/metrics" in err
    thread.join()
    assert scraped, "never scraped"
    last = scraped[-1]
    labels = 'model="m",route="/v1/chat/completions"'
    assert f'tailreplay_replay_requests_total{{{labels},status="2xx"}} 300.0' in last
    assert "tailreplay_replay_sent_total 300.0" in last
    assert "tailreplay_replay_lag_seconds_count 300.0" in last
    assert (
        'tailreplay_replay_ttft_seconds_count{model="m",route="/v1/chat/completions"} 300.0' in last
    )


def test_ctrl_c_flushes_the_spans_of_requests_already_done(tmp_path: Path, sim: str) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from tailreplay.traces.archive.reader import ArchiveReader

    _archive(tmp_path / "a.msgpack", 3000, rate=100)  # 30 s: stopped long before the end
    with receiver_in_thread() as otlp:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "tailreplay", "replay", str(tmp_path / "a.msgpack"),
                "--target", sim, "--out", str(tmp_path / "r.msgpack"),
                "--otlp-endpoint", otlp.url,
            ],
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        time.sleep(4)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        results = [r for r in ArchiveReader([tmp_path / "r.msgpack"]) if r.sent_ns is not None]
        assert 100 < len(results) < 3000
        assert f"spans: {len(results):,} exported" in err
        assert len(otlp.spans) == len(results)
        assert {s.span_id for s in otlp.spans} == {r.span_id.hex() for r in results}
