"""Live replays against the simulator (in its own process) and a logging responder."""

from __future__ import annotations

import gc
import json
import os
import random
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.replayer.health import run_queue_ns, steal_ticks
from tailreplay.replayer.preflight import PROBE_HEADER
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tests.helpers import (
    HEADER,
    UNBOUND,
    assert_client_verdict_consistent,
    sim_slowdown_between,
    sim_steps,
    write_plain,
)
from tests.proxy_helpers import serve_in_thread

T0 = 1_700_000_000 * 10**9


def _poisson_archive(
    path: Path, n: int, span_s: float, seed: int = 5, **extra: object
) -> list[dict]:
    rng = random.Random(seed)
    starts = sorted(rng.uniform(0, span_s) for _ in range(n))
    maps = [
        {
            "start_ns": T0 + round(s * 1e9),
            "trace_id": rng.randbytes(16),
            "span_id": rng.randbytes(8),
            "method": "POST",
            "path": "/v1/chat/completions",
            "model": "m",
            "stream": i % 2 == 0,
            "input_tokens": rng.randint(20, 200),
            "output_tokens": rng.randint(2, 6),
            "duration_ns": rng.randint(10**8, 10**9),
            **extra,
        }
        for i, s in enumerate(starts)
    ]
    write_plain(path, maps)
    return maps


@pytest.fixture(scope="module")
def fast_sim() -> Iterator[str]:
    with sim_process(
        ["--profile", "fast", "--max-num-seqs", "1024", "--queue-limit", "4096"]
    ) as url:
        yield url


def _replay(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["replay", *args])
    return result.exit_code, result.stdout, result.stderr


def _replay_2x(
    tmp_path: Path, fast_sim: str, n: int, span_s: float, *extra: str
) -> tuple[list[dict], list[Record], dict, str]:
    """``n`` Poisson arrivals over ``span_s`` replayed at 2x: (the recorded maps, the
    result records, the JSON summary, stdout)."""
    archive = tmp_path / "a.msgpack"
    maps = _poisson_archive(archive, n, span_s)
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    args = ["--speed", "2x", "--target", fast_sim, "--out", str(out), "--json", str(summary)]
    code, stdout, err = _replay(*args, *extra, str(archive))
    assert code == 0, err
    return maps, list(ArchiveReader([out])), json.loads(summary.read_text()), stdout


def test_2x_replay_keeps_the_arrival_process(tmp_path: Path, fast_sim: str) -> None:
    maps, results, s, stdout = _replay_2x(tmp_path, fast_sim, 1500, 15.0, *UNBOUND)
    assert len(results) == s["requests"] == s["sent"] == 1500 and s["dropped"] == 0
    # Each request was due at its recorded offset halved, to the nanosecond...
    by_trace = {m["trace_id"]: m["start_ns"] - maps[0]["start_ns"] for m in maps}
    first_due = min(r.intended_ns for r in results)
    for r in results:
        assert r.intended_ns - first_due == pytest.approx(by_trace[r.orig_trace_id] / 2, abs=1)
        # ...and left when due plus its dispatch lag (one clock: they agree exactly).
        assert r.sent_ns == r.intended_ns + r.lag_ns
    assert {r.orig_trace_id for r in results} == {m["trace_id"] for m in maps}
    assert all(r.trace_id == r.orig_trace_id for r in results)  # a new span in the same trace
    assert s["completed"] == 1500 and not s["errors"]
    # When they left is the perf test below; the summary's verdict agrees with its lag.
    assert_client_verdict_consistent(s, stdout)


@pytest.mark.perf
def test_2x_replay_sends_within_10_ms_at_200_rps(tmp_path: Path, fast_sim: str) -> None:
    maps, results, s, _ = _replay_2x(tmp_path, fast_sim, 3000, 30.0)
    assert len(results) == 3000
    lag_p99 = s["lag_ms"]["p99"]
    print(f"lag p99 {lag_p99:.2f} ms at 200 rps")
    assert lag_p99 <= 10.0  # docs/benchmarks.md has the figures (well under 1 ms, idle)
    # The sends span the recording halved.
    sent = np.array(sorted(r.sent_ns for r in results))
    assert (sent[-1] - sent[0]) / 1e9 == pytest.approx(
        (maps[-1]["start_ns"] - maps[0]["start_ns"]) / 2e9, abs=0.5
    )


def _replay_beside_a_heap(
    tmp_path: Path, fast_sim: str, *extra: str
) -> tuple[dict, str, float, list[float]]:
    """300 requests over 3 s replayed beside a heap of two million tracked objects that a
    thread collects every 100 ms: (the JSON summary, stdout, a full collection's seconds
    before the run, the seconds of each collection while the run sent)."""
    # A test session or an embedding program: two million tracked objects, whose
    # full collection holds the interpreter ~60 ms here. The thread collects as the
    # interpreter would on its own at some point, but every 100 ms.
    heap = [[] for _ in range(2_000_000)]
    # What a full collection costs with the heap, on this machine as busy as it is now.
    took = []
    for _ in range(3):
        t = time.perf_counter()
        gc.collect()
        took.append(time.perf_counter() - t)
    bare = statistics.median(took)
    archive, out, summary = tmp_path / "a.msgpack", tmp_path / "r.msgpack", tmp_path / "s.json"
    _poisson_archive(archive, 300, 3.0)
    done = threading.Event()
    collects: list[tuple[int, float]] = []  # (wall clock at its start, seconds it took)

    def collect() -> None:
        while not done.wait(0.1):
            at, t = time.time_ns(), time.perf_counter()
            gc.collect()
            collects.append((at, time.perf_counter() - t))

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    try:
        code, stdout, err = _replay(
            "--target", fast_sim, "--out", str(out), "--json", str(summary), *extra, str(archive)
        )
    finally:
        done.set()
        collector.join()
    assert code == 0, err
    assert len(heap) == 2_000_000  # still there: frozen for the run, not lost
    sent = [r.sent_ns for r in ArchiveReader([out]) if r.sent_ns is not None]
    during = [t for at, t in collects if min(sent) <= at and at + t * 1e9 <= max(sent)]
    return json.loads(summary.read_text()), stdout, bare, during


def test_a_large_heap_beside_the_replay_is_frozen_for_the_run(
    tmp_path: Path, fast_sim: str
) -> None:
    s, stdout, bare, during = _replay_beside_a_heap(tmp_path, fast_sim, *UNBOUND)
    assert s["completed"] == 300
    # The heap is frozen for the run: a collection while it sends walks the run's own
    # objects (~1 ms), not the two million (~60 ms, which made P99 lag ~60 ms).
    print(
        f"a full collection: {bare * 1e3:.0f} ms before the run, during it "
        f"{statistics.median(during) * 1e3:.1f} ms (median of {len(during)} collections)"
    )
    assert len(during) >= 10, during  # 3 s of sending, one every 100 ms (or later)
    assert statistics.median(during) < bare / 4, (bare, during)
    assert_client_verdict_consistent(s, stdout)


@pytest.mark.perf
def test_a_large_heap_beside_the_replay_does_not_make_requests_late(
    tmp_path: Path, fast_sim: str
) -> None:
    s, stdout, _, _ = _replay_beside_a_heap(tmp_path, fast_sim)
    assert s["completed"] == 300
    # On time by the default limit (lag P99 within 5 ms), collections and all.
    assert s["lag_ms"]["p99"] <= s["client"]["lag_limit_ms"] == 5.0, s["lag_ms"]
    assert not s["client"]["client_bound"], stdout


def test_two_replays_send_the_same_requests_in_the_same_order(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    _poisson_archive(archive, 120, 2.0, seed=9)
    seen: list[dict[str, bytes]] = [{}, {}]
    run = 0

    async def log(request: web.Request) -> web.Response:
        if PROBE_HEADER not in request.headers:  # the preflight's extra request
            seen[run][request.headers["traceparent"][3:35]] = await request.read()
        # No usage: prompt lengths are then never corrected, so both runs must match.
        return web.json_response({"choices": [{"message": {"content": "x"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", log)
    orders = []
    with serve_in_thread(app) as url:
        for run in (0, 1):
            out = tmp_path / f"r{run}.msgpack"
            code, _, err = _replay(
                "--speed", "4x", "--target", url, "--out", str(out), str(archive)
            )
            assert code == 0, err
            results = sorted(ArchiveReader([out]), key=lambda r: r.sent_ns or 0)
            orders.append([r.orig_trace_id for r in results])
    assert len(seen[0]) == 120 and seen[0] == seen[1]  # the same bodies for the same traces
    assert orders[0] == orders[1]  # sent in the same order
    body = json.loads(next(iter(seen[0].values())))
    assert body["ignore_eos"] is True and body["min_tokens"] == body["max_tokens"]


def _stretched(
    tmp_path: Path, fast_sim: str, *extra: str
) -> tuple[list[dict], list[int], dict[str, dict], dict[str, str], dict[str, float]]:
    """400 requests over 4 s, the slowest 3% recorded with the most output, replayed with
    --tail-stretch 1.0 and 1.8: (the recorded maps, their indices by duration, and by
    factor the JSON summary, stdout and the simulator's slowdown against its model)."""
    archive = tmp_path / "a.msgpack"
    maps = _poisson_archive(archive, 400, 4.0, seed=11)
    # The recorded tail: the slowest 3% also produced the most output.
    order = sorted(range(400), key=lambda i: maps[i]["duration_ns"])
    for i in order[-12:]:
        maps[i]["output_tokens"] = 150
    write_plain(archive, maps)
    summaries, said, slowdown = {}, {}, {}
    for factor in ("1.0", "1.8"):
        summary, out = tmp_path / f"{factor}.json", tmp_path / f"{factor}.msgpack"
        before = sim_steps(fast_sim)
        code, said[factor], err = _replay(
            "--tail-stretch",
            factor,
            "--tail-quantile",
            "0.97",
            "--target",
            fast_sim,
            "--out",
            str(out),
            "--json",
            str(summary),
            *extra,
            str(archive),
        )
        assert code == 0, err
        slowdown[factor] = sim_slowdown_between(before, sim_steps(fast_sim))
        summaries[factor] = json.loads(summary.read_text())
    return maps, order, summaries, said, slowdown


def test_tail_stretch_asks_the_recorded_tail_for_more_output(tmp_path: Path, fast_sim: str) -> None:
    maps, order, summaries, said, _ = _stretched(tmp_path, fast_sim, *UNBOUND)
    outputs = {}
    for factor in ("1.0", "1.8"):
        results = list(ArchiveReader([tmp_path / f"{factor}.msgpack"]))
        outputs[factor] = {r.orig_trace_id: r.output_tokens for r in results}
        tails = sum(bool(r.tail) for r in results)
        assert summaries[factor]["tail"]["count"] == tails
    # One reading of a stretch of 1 in every view: off, no request in the tail.
    assert "tail: off (--tail-stretch 1)" in said["1.0"] and tails == 12
    doc = tmp_path / "report.json"
    report = CliRunner().invoke(cli, ["report", str(tmp_path / "1.0.msgpack"), "--json", str(doc)])
    assert "--tail-stretch" in report.stdout and " off " in report.stdout, report.stdout
    assert json.loads(doc.read_text())["overall"]["replayed"]["tail"] == 0
    # The recorded tail asked for (and, with ignore_eos, got) 1.8 times its output.
    tail = {maps[i]["trace_id"] for i in order[-12:]}
    assert {outputs["1.0"][t] for t in tail} == {150}
    assert {outputs["1.8"][t] for t in tail} == {270}
    assert all(outputs["1.8"][t] == n for t, n in outputs["1.0"].items() if t not in tail)


@pytest.mark.perf
def test_tail_stretch_raises_the_targets_p99(tmp_path: Path, fast_sim: str) -> None:
    _, _, summaries, _, slowdown = _stretched(tmp_path, fast_sim)
    p99 = {f: summaries[f]["latency_ms"]["p99"] for f in summaries}
    print(
        f"simulator P99: stretch 1.0 {p99['1.0']:.0f} ms, stretch 1.8 {p99['1.8']:.0f} ms "
        f"(its steps {slowdown['1.0']:+.0%}, {slowdown['1.8']:+.0%} against its model)"
    )
    # The simulator's P99 follows its model's step times: the tail's longer outputs
    # (1.8 times as many steps) raise it.
    assert p99["1.8"] > 1.3 * p99["1.0"]


def test_target_equal_to_the_captured_upstream_is_refused(tmp_path: Path) -> None:
    header = {**HEADER, "upstream": "http://127.0.0.1:8123"}
    archive = write_plain(tmp_path / "a.msgpack", [{"start_ns": T0}], header)
    code, _, err = _replay("--target", "http://127.0.0.1:8123/", str(archive))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "captured from" in err


def test_unreachable_target_records_errors_and_exits_5(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    _poisson_archive(archive, 30, 0.3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        out = tmp_path / "r.msgpack"
        code, stdout, _ = _replay(
            "--target", dead, "--no-preflight", "--fail-fast", "0", "--out", str(out), str(archive)
        )
    assert code == 5  # the target could not be measured
    assert "errors: connect 30" in stdout
    assert [r.error for r in ArchiveReader([out])] == ["connect"] * 30


def test_bad_input_exit_codes(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    _poisson_archive(archive, 10, 1.0)
    code, _, err = _replay("--speed", "fast", "--dry-run", str(archive))
    assert code == 2 and "invalid --speed" in err
    bad = tmp_path / "bad.msgpack"
    data = bytearray(archive.read_bytes())
    data[200:206] = b"\xc1" * 6
    bad.write_bytes(bytes(data))
    code, _, err = _replay("--dry-run", "--out", str(tmp_path / "o.msgpack"), str(bad))
    assert code == 3 and "corrupt archive at byte offset" in err
    code, _, err = _replay("--dry-run", str(tmp_path / "missing.msgpack"))
    assert code == 3 and "no such file" in err


def test_a_target_that_rejects_forced_fields_gets_them_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive = tmp_path / "a.msgpack"
    _poisson_archive(archive, 20, 0.5, seed=2)
    bodies: list[dict] = []

    async def strict(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        if "min_tokens" in body or "ignore_eos" in body:  # as OpenAI's own API answers
            return web.json_response(
                {"error": {"message": "Unrecognized request argument supplied: min_tokens"}},
                status=400,
            )
        return web.json_response({"choices": [{"message": {"content": "x"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", strict)
    with serve_in_thread(app) as url:
        code, stdout, err = _replay("--target", url, "--max-inflight", "1", str(archive))
    assert code == 0, err
    assert "completed 20" in stdout and "errors: none" in stdout
    warnings = [r for r in caplog.records if "rejects min_tokens/ignore_eos" in r.getMessage()]
    assert len(warnings) == 1  # one warning for the run, not one per request
    assert all("min_tokens" not in b for b in bodies[-15:])


def test_body_edits_reach_the_target_last_of_all(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    recorded = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "u-1",
                "tools": [{"type": "function"}], "stream": False}  # fmt: skip
    maps = _poisson_archive(archive, 6, 0.2, seed=3)
    maps[0]["req_body"] = json.dumps(recorded).encode()  # one kept its body, five did not
    write_plain(archive, maps)
    bodies: list[dict] = []

    async def log(request: web.Request) -> web.Response:
        if PROBE_HEADER not in request.headers:
            bodies.append(await request.json())
        return web.json_response({"choices": [{"message": {"content": "x"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", log)
    with serve_in_thread(app) as url:
        code, _, err = _replay(
            "--target", url, "--body-set", "temperature=0", "--body-set", "stream=false",
            "--body-set", "metadata.run=replay-7", "--body-set", "max_tokens=5",
            "--body-drop", "user", "--body-drop", "tools", str(archive),
        )  # fmt: skip
    assert code == 0, err
    assert len(bodies) == 6
    for body in bodies:
        assert body["temperature"] == 0 and body["stream"] is False
        assert body["metadata"] == {"run": "replay-7"}
        assert body["max_tokens"] == 5  # the user's word is last, over the tail budget
        assert "user" not in body and "tools" not in body
    assert sum(b["messages"] == recorded["messages"] for b in bodies) == 1
    code, _, err = _replay("--dry-run", "--body-set", "=1", str(archive))
    assert code == 2 and "invalid --body-set '=1'" in err


def test_outputs_in_missing_directories_are_one_line(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    _poisson_archive(archive, 5, 0.1)
    for flag in ("--out", "--json"):
        code, _, err = _replay("--dry-run", flag, str(tmp_path / "missing" / "x"), str(archive))
        assert code == 2 and f"{flag} " in err and "no such directory" in err
        assert "Traceback" not in err


def test_a_client_bound_run_says_so_and_its_slo_is_not_judged(
    tmp_path: Path, fast_sim: str
) -> None:
    archive = tmp_path / "a.msgpack"
    _poisson_archive(archive, 200, 2.0)
    # A limit no machine meets stands in for a busy client (tests/load checks the real one).
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    code, stdout, err = _replay("--target", fast_sim, "--lag-limit", "1ns", "--out", str(out),
                                "--json", str(summary), str(archive))  # fmt: skip
    assert code == 0, err
    assert "warning: the client was the bottleneck: dispatch lag P99" in stdout
    client = json.loads(summary.read_text())["client"]
    assert client["client_bound"] and client["lag_limit_ms"] == pytest.approx(1e-6)
    assert client["cpu_share"] > 0 and client["loop_stalls"] is not None
    # The busy wait before each send is CPU spent on precision, not on requests.
    assert 0 <= client["cpu_busy_share"] < client["cpu_share"]
    # Linux says how long the loop waited for a CPU and what the hypervisor took.
    if run_queue_ns() is not None:
        assert 0 <= client["cpu_wait_share"] < 1
    if steal_ticks() is not None:
        assert 0 <= client["steal_share"] < 1
    # The report of that run says it, and an SLO gate on it is not judged (exit 4).
    result = CliRunner().invoke(cli, ["report", str(out), "--slo", "latency:p99<=60s"])
    assert result.exit_code == 4
    assert "CLIENT-BOUND" in result.stdout and "SLO NOT JUDGED" in result.stdout
    assert "(NOT JUDGED)" in result.stdout and "PASS" not in result.stdout  # every view
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("Error: SLO not judged: the client was the bottleneck (dispatch lag P99")
    )
    # Within its limit (one no machine misses), a run is measured, and says so.
    code, stdout, err = _replay("--target", fast_sim, "--out", str(tmp_path / "ok.msgpack"),
                                "--lag-limit", "10s", str(archive))  # fmt: skip
    assert code == 0, err
    assert "client: dispatch lag P99" in stdout and "bottleneck" not in stdout
    ok = CliRunner().invoke(cli, ["report", str(tmp_path / "ok.msgpack"),
                                  "--slo", "latency:p99<=60s"])  # fmt: skip
    assert ok.exit_code == 0 and "SLO PASS" in ok.stdout, ok.stderr


_HEADLINE = {"pass": "SLO PASS", "fail": "SLO FAIL", "not_judged": "SLO NOT JUDGED"}
_TITLE = {"pass": "(PASS)", "fail": "(FAIL)", "not_judged": "(NOT JUDGED)"}


def test_one_verdict_in_every_view_and_an_exit_code_for_each_meaning(
    tmp_path: Path, fast_sim: str
) -> None:
    """The verdict matrix: each way a gated run ends has its exit code (README, "Exit
    codes"), and the JSON, the headline, the SLO table and the API say the same."""
    from tailreplay import api

    archive = tmp_path / "a.msgpack"
    _poisson_archive(archive, 100, 1.0)
    summary = tmp_path / "s.json"
    slo = ["--slo", "latency:p99<=60s"]
    gated = {
        # A lag limit no machine misses: this gate's verdict, not the client's, is tested.
        "pass": ([*slo, "--lag-limit", "10s"], 0, "pass"),
        "miss": (["--slo", "latency:p99<=60s,ttft:p50<=1us", "--lag-limit", "10s"], 1, "fail"),
        # A limit no machine meets stands in for a busy client.
        "client-bound": ([*slo, "--lag-limit", "1ns"], 4, "not_judged"),
    }
    codes = {}
    for name, (args, exit_code, state) in gated.items():
        out = tmp_path / f"{name}.msgpack"
        code, stdout, err = _replay("--target", fast_sim, "--out", str(out),
                                    "--json", str(summary), *args, str(archive))  # fmt: skip
        assert code == exit_code, (name, err)
        codes[name] = code
        verdict = json.loads(summary.read_text())["slo"]
        assert (verdict["state"], verdict["judged"]) == (state, state != "not_judged"), name
        assert verdict["passed"] is {"pass": True, "fail": False, "not_judged": None}[state]
        assert _HEADLINE[state] in stdout and _TITLE[state] in stdout, (name, stdout)
        others = [w for k, w in _TITLE.items() if k != state]
        assert not any(w in stdout for w in others), (name, stdout)  # nothing contradicts it
        judged = api.report(out, slos=args[1].split(","))
        assert (judged.verdict, judged.reason) == (state, verdict["reason"]), name
    # Runs that could not measure the target: refused by the preflight, or stopped by
    # --fail-fast. Neither is a verdict on the target's SLO.
    for name, status, extra in (
        ("preflight refused", 404, []),
        ("fail-fast stop", 500, ["--no-preflight", "--fail-fast", "5"]),
    ):
        with serve_in_thread(_answering(status)) as url:
            code, _, err = _replay("--target", url, "--out", str(tmp_path / "x.msgpack"),
                                   *slo, *extra, str(archive))  # fmt: skip
        assert code == 5, (name, err)
        assert any(line.startswith("Error: ") for line in err.splitlines()), (name, err)
        codes[name] = code
        (tmp_path / "x.msgpack").unlink(missing_ok=True)
    assert (
        len({codes["pass"], codes["miss"], codes["client-bound"], codes["preflight refused"]}) == 4
    )


def _answering(status: int) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"error": {"message": f"always {status}"}}, status=status)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    return app


_PHASES = ("step 1 1x", "step 2 3x")


def _stepped(
    tmp_path: Path, fast_sim: str, *extra: str
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict, str]:
    """800 requests over 20 s replayed at 1x for 4 s, then 3x: by phase the due and the
    sent offsets in seconds from the start (sorted), the JSON summary and stdout."""
    archive = tmp_path / "a.msgpack"
    _poisson_archive(archive, 800, 20.0)  # 40 req/s recorded
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    args = ["--speed", "1x,3x@4s", "--target", fast_sim, "--out", str(out)]
    code, stdout, err = _replay(*args, "--json", str(summary), *extra, str(archive))
    assert code == 0, err
    results = list(ArchiveReader([out]))
    t0 = min(r.intended_ns for r in results)
    due: dict[str, list[int]] = {}
    sent: dict[str, list[int]] = {}
    for r in results:
        assert r.phase is not None and r.status == 200
        due.setdefault(r.phase, []).append(r.intended_ns - t0)
        sent.setdefault(r.phase, []).append(r.sent_ns - t0)
    assert set(due) == set(_PHASES)
    return (
        {p: np.array(sorted(due[p])) / 1e9 for p in _PHASES},
        {p: np.array(sorted(sent[p])) / 1e9 for p in _PHASES},
        json.loads(summary.read_text()),
        stdout,
    )


def test_steps_are_due_at_each_steps_rate_and_reported_by_phase(
    tmp_path: Path, fast_sim: str
) -> None:
    due, _, summary, stdout = _stepped(tmp_path, fast_sim, *UNBOUND)
    # The first 4 s of replay at 1x send the first 4 s of the recording (~160); the
    # other 16 s of it go at 3x, in ~5.3 s. Each phase is due so.
    first, second = (due[p] for p in _PHASES)
    assert 110 < first.size < 210 and first.size + second.size == 800
    assert first[-1] < 4.0 <= second[0]
    assert second.size / (second[-1] - second[0]) == pytest.approx(120, rel=0.15)
    assert_client_verdict_consistent(summary, stdout)
    report = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "r.msgpack"), "--json", str(report)])
    assert result.exit_code == 0, result.output
    assert "replayed by load phase" in result.output
    rows = {row["phase"]: row for row in json.loads(report.read_text())["phases"]}
    assert rows["step 1 1x"]["seconds"] == pytest.approx(4.0)
    assert rows["step 1 1x"]["replayed"]["requests"] == first.size
    assert rows["step 2 3x"]["replayed"]["requests"] == second.size


@pytest.mark.perf
def test_steps_are_sent_at_each_steps_rate(tmp_path: Path, fast_sim: str) -> None:
    _, sent, summary, stdout = _stepped(tmp_path, fast_sim)
    assert not summary["client"]["client_bound"], stdout
    first, second = (sent[p] for p in _PHASES)
    assert first[-1] < 4.1 and second[0] >= 3.99
    assert second.size / (second[-1] - second[0]) == pytest.approx(120, rel=0.15)
    report = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "r.msgpack"), "--json", str(report)])
    assert result.exit_code == 0, result.output
    rows = {row["phase"]: row for row in json.loads(report.read_text())["phases"]}
    assert rows["step 2 3x"]["replayed"]["throughput_rps"] == pytest.approx(120, rel=0.15)


def test_an_output_that_cannot_be_written_is_one_line_exit_3(tmp_path: Path) -> None:
    """``--out`` (and a merge's ``-o``) where writing is refused: one line, exit 3."""
    archive = tmp_path / "a.msgpack"
    _poisson_archive(archive, 5, 0.1)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    # Root writes past a directory's mode; sysfs refuses a new file even to root.
    out = Path("/sys/x.msgpack") if os.geteuid() == 0 else locked / "x.msgpack"
    code, _, err = _replay("--dry-run", "--out", str(out), str(archive))
    assert code == 3 and err.strip() == f"Error: {out}: cannot write (Permission denied)"
    merge = CliRunner().invoke(cli, ["traces", "merge", "-o", str(out), str(archive)])
    assert merge.exit_code == 3 and "Traceback" not in merge.output
    assert merge.stderr.strip() == f"Error: {out}: cannot write (Permission denied)"


@pytest.mark.parametrize("bodies", [False, True])
def test_the_preflight_leaves_nothing_in_the_targets_prefix_cache(
    tmp_path: Path, fast_sim: str, bodies: bool
) -> None:
    """The probe has a prompt of its own: the first recorded request finds nothing of
    its prompt cached, while the second, which recorded the same prefix, does."""
    archive = tmp_path / "a.msgpack"
    rng = random.Random(11)
    prompt = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(900))
    maps = [
        {
            "start_ns": T0 + i * 10**9,
            "trace_id": rng.randbytes(16),
            "span_id": rng.randbytes(8),
            "method": "POST",
            "path": "/v1/chat/completions",
            "model": "m",
            "stream": False,
            "input_tokens": 900,
            "output_tokens": 2,
            "prefix_hashes": list(range(1, 8)),
            **(
                {"req_body": json.dumps({"model": "m", "messages": [
                    {"role": "user", "content": prompt}], "max_tokens": 2}).encode()}
                if bodies else {}
            ),
        }
        for i in range(2)
    ]  # fmt: skip
    write_plain(archive, maps)
    out = tmp_path / "r.msgpack"
    code, _, err = _replay("--target", fast_sim, "--out", str(out), "--speed", "4x", str(archive))
    assert code == 0, err
    first, second = sorted(ArchiveReader([out]), key=lambda r: r.intended_ns or 0)
    assert (first.status, second.status) == (200, 200)
    assert not first.cached_tokens, first.cached_tokens
    assert second.cached_tokens and second.cached_tokens >= 512
