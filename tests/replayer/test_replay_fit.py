"""Replays that fit their target: the built-in simulator sized to the trace, the
target's own error message carried to the summary and the report, the tail chosen
by service demand, stretched budgets cut to the context, rates scaled by the speed.

The live tests run ``tailreplay`` in its own process, against the built-in
simulator (its own process too) or a small aiohttp target on 127.0.0.1.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.replayer.preflight import PROBE_HEADER
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import chat_archive, write_plain
from tests.proxy_helpers import serve_in_thread

T0 = 1_700_000_000 * 10**9


def _tailreplay(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailreplay", *args],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip


def _records(n: int, seed: int, **fields: Any) -> list[dict[str, Any]]:
    """``n`` body-less chat records 200 ms apart: token counts, no latencies."""
    rng = random.Random(seed)
    return [
        {
            "start_ns": T0 + i * 200_000_000,
            "trace_id": rng.randbytes(16),
            "span_id": rng.randbytes(8),
            "method": "POST",
            "path": "/v1/chat/completions",
            "model": "m",
            "stream": i % 2 == 0,
            "input_tokens": rng.randint(100, 400),
            "output_tokens": rng.randint(2, 6),
            **fields,
        }
        for i in range(n)
    ]


def test_prompts_of_100k_tokens_replay_against_the_builtin_simulator(tmp_path: Path) -> None:
    maps = _records(12, seed=1)
    for m in maps[::3]:  # a third of the trace: prompts far past the profile's 8,192
        m["input_tokens"] = 100_000
    archive = write_plain(tmp_path / "long.msgpack", maps)
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    done = _tailreplay("replay", "--out", str(out), "--json", str(summary), str(archive))
    assert done.returncode == 0, done.stderr
    s = json.loads(summary.read_text())
    assert s["completed"] == 12 and s["errors"] == {}
    # One start-up line names the size chosen: 100,000 + the budget, and 10% more.
    sized = [line for line in done.stderr.splitlines() if "built-in simulator at" in line]
    assert len(sized) == 1 and "context 110,592 tokens" in sized[0], done.stderr
    assert "the longest request is 100,0" in sized[0]
    results = list(ArchiveReader([out]))
    assert sorted(r.input_tokens for r in results if r.input_tokens > 8192) == [100_000] * 4


def test_a_refusing_targets_own_message_reaches_summary_json_and_report(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 40, gap_ms=20, seed=4)  # output tokens 2..8: the budgets
    secret = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8t"
    refusal = (
        "This model's maximum context length is 4096 tokens. However, you requested "
        f"9000 tokens; key {secret} " + "padding " * 40 + "\nsecond line, never kept"
    )

    async def strict(request: web.Request) -> web.Response:
        budget = (await request.json())["max_tokens"]
        if PROBE_HEADER in request.headers:  # before the run: an API's own 400 passes
            return web.json_response({"error": {"message": refusal}}, status=400)
        if budget >= 7:
            return web.Response(status=503, text="overloaded, come back later\nretry: 3")
        if budget >= 4:
            return web.json_response(
                {"error": {"message": refusal, "type": "invalid_request_error"}}, status=400
            )
        return web.json_response({"choices": [{"message": {"content": "x"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", strict)
    out, summary, report = tmp_path / "r.msgpack", tmp_path / "s.json", tmp_path / "rep.json"
    with serve_in_thread(app) as url:
        done = _tailreplay(
            "replay", "--target", url, "--out", str(out), "--json", str(summary), str(archive)
        )
    assert done.returncode == 0, done.stderr
    s = json.loads(summary.read_text())
    assert s["errors"]["http_400"] > 0 and s["errors"]["http_503"] > 0
    said = s["error_messages"]["http_400"]
    assert "/v1/chat/completions answered 400 in " in done.stderr
    assert f" ms: {said}\n" in done.stderr  # said before the run, too
    assert said.startswith("This model's maximum context length is 4096 tokens. However,")
    assert len(said) <= 200 and said.endswith("…")
    assert secret not in said and "[KEY:fp:" in said  # an error may echo what was sent
    assert s["error_messages"]["http_503"] == "overloaded, come back later"
    assert f"  http_400: {said}" in done.stdout.splitlines()
    assert "  http_503: overloaded, come back later" in done.stdout.splitlines()
    assert "second line" not in done.stdout + summary.read_text()
    kept = {r.error_message for r in ArchiveReader([out]) if r.error == "http_400"}
    assert kept == {said}
    assert not (out.read_bytes().count(secret.encode()))

    shown = _tailreplay("report", str(out), "--json", str(report))
    assert shown.returncode == 0, shown.stderr
    assert "errors by kind" in shown.stdout and said in shown.stdout
    assert "overloaded, come back later" in shown.stdout
    rows = {e["kind"]: e for e in json.loads(report.read_text())["errors"]["replayed"]}
    assert rows["http_400"]["message"] == said
    assert rows["http_400"]["count"] == s["errors"]["http_400"]


def _dry(tmp_path: Path, archive: Path, *args: str) -> tuple[list[Any], dict[str, Any], str]:
    out, summary = tmp_path / "dry.msgpack", tmp_path / "dry.json"
    result = CliRunner().invoke(
        cli, ["replay", "--dry-run", "--out", str(out), "--overwrite", "--json", str(summary),
              *args, str(archive)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return list(ArchiveReader([out])), json.loads(summary.read_text()), result.output


def _demand_archive(tmp_path: Path) -> tuple[Path, bytes, bytes]:
    """98 small requests, one long prompt with few output tokens and one short prompt
    with a few more: the long one keeps a server busiest. (Of 100, the P99 falls
    between the two largest: exactly one is the tail.)"""
    maps = _records(100, seed=5, input_tokens=100, output_tokens=50)
    maps[40].update(input_tokens=100_000, output_tokens=60)
    maps[70].update(input_tokens=100, output_tokens=70)
    return write_plain(tmp_path / "d.msgpack", maps), maps[40]["trace_id"], maps[70]["trace_id"]


def test_without_latencies_the_tail_is_chosen_by_service_demand(tmp_path: Path) -> None:
    archive, long_prompt, short_prompt = _demand_archive(tmp_path)
    got, s, output = _dry(tmp_path, archive)
    assert [r.orig_trace_id for r in got if r.tail] == [long_prompt]
    assert next(r.max_tokens for r in got if r.orig_trace_id == long_prompt) == 108  # 1.8 x 60
    assert "the tail is chosen by service demand (0.0125 ms an input token" in output
    assert "tail: 1 request at or above P99 of service demand, output x1.8" in output
    assert s["tail"]["by"] == "service_demand"
    # --tail-cost weighs output tokens alone: the other one is the tail.
    got, _, output = _dry(tmp_path, archive, "--tail-cost", "input=0,output=1")
    assert [r.orig_trace_id for r in got if r.tail] == [short_prompt]
    assert "(0 ms an input token + 1 ms an output token; --tail-cost)" in output


def test_a_stretched_budget_is_cut_to_the_context_and_counted(tmp_path: Path) -> None:
    archive, long_prompt, _ = _demand_archive(tmp_path)
    got, s, output = _dry(tmp_path, archive, "--max-context", "100080")
    assert next(r.max_tokens for r in got if r.orig_trace_id == long_prompt) == 80
    assert "(1 cut to fit the 100,080-token context)" in output
    assert s["tail"]["capped"] == 1 and s["tail"]["context"] == 100_080
    assert "warning" not in output
    # Never below the recorded budget: a context the record overflows leaves it as it was,
    # and a warning before the run says the target will refuse it.
    got, s, output = _dry(tmp_path, archive, "--max-context", "100010")
    assert next(r.max_tokens for r in got if r.orig_trace_id == long_prompt) == 60
    assert s["tail"]["capped"] == 1
    assert (
        "warning: 1 requests need more than the 100,010-token context as recorded "
        "(the longest 100,060 tokens): the target will refuse them"
    ) in output


def test_a_context_pinned_by_sim_arg_cuts_the_tail_live(tmp_path: Path) -> None:
    # Half the records are the tail; stretched, 4,000 + 1.8 x 300 = 4,540 tokens would
    # not fit the 4,400-token context the simulator is pinned to.
    maps = _records(12, 6, input_tokens=4000)
    for i, m in enumerate(maps):
        m["output_tokens"] = 300 + i  # distinct: the P50 splits them 6/6
    archive = write_plain(tmp_path / "c.msgpack", maps)
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    done = _tailreplay(
        "replay", "--tail-quantile", "0.5", "--sim-arg=--max-model-len=4400",
        "--sim-arg=--decode-base-ms=1", "--out", str(out), "--json", str(summary), str(archive),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    s = json.loads(summary.read_text())
    assert s["errors"] == {} and s["completed"] == 12
    assert s["tail"]["capped"] == 6 and s["tail"]["count"] == 6
    assert "(6 cut to fit the 4,400-token context)" in done.stdout
    assert "context 4,400 tokens (--sim-arg)" in done.stderr
    results = list(ArchiveReader([out]))
    assert {r.max_tokens for r in results if r.tail} == {400}
    assert all(r.output_tokens == r.max_tokens for r in results)


def test_the_report_compares_throughput_at_the_replays_speed(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 60, gap_ms=100, seed=8)
    out, report = tmp_path / "r.msgpack", tmp_path / "rep.json"
    done = _tailreplay(
        "replay", "--speed", "2x", "--sim-arg=--decode-base-ms=1", "--out", str(out), str(archive)
    )
    assert done.returncode == 0, done.stderr
    shown = _tailreplay("report", str(out), "--json", str(report))
    assert shown.returncode == 0, shown.stderr
    r = json.loads(report.read_text())
    assert r["rate_scale"] == 2.0
    recorded = r["overall"]["recorded"]["throughput_rps"]
    row = next(line for line in shown.stdout.splitlines() if "throughput req/s" in line)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    assert cells[1:3] == [f"{recorded:,.2f}", f"{2 * recorded:,.2f}"]
    header = next(line for line in shown.stdout.splitlines() if "recorded x2" in line)
    assert header.index("recorded x2") > header.index("recorded ") >= 0
    assert "the recorded rates at the replay's speed 2x" in shown.stdout


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--tail-cost", "input=1"], "invalid --tail-cost 'input=1'"),
        (["--tail-cost", "input=0,output=0"], "invalid --tail-cost"),
        (["--tail-cost", "input=-1,output=2"], "invalid --tail-cost"),
        (["--sim-arg=--max-model-len=big"], "invalid --sim-arg '--max-model-len=big'"),
        (["--sim-arg=--no-such=1"], "No such option '--no-such'"),
        (["--target", "http://127.0.0.1:9", "--sim-arg=--kv-tokens=9"], "--sim-arg sets up"),
    ],
)
def test_bad_target_options_are_one_line(tmp_path: Path, args: list[str], error: str) -> None:
    archive = write_plain(tmp_path / "a.msgpack", _records(3, 1))
    result = CliRunner().invoke(cli, ["replay", "--dry-run", *args, str(archive)])
    assert result.exit_code == 2 and error in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "too long", "type": "invalid_request_error"}}', "too long"),
        (b'{"error": "model not found"}', "model not found"),  # llama.cpp's older form
        (b'{"message": "Bad request", "code": 400}', "Bad request"),
        (b'{"detail": [{"loc": ["body"], "msg": "field required"}]}', "field required"),
        (b'{"error": {"message": "cut \\"here\\" by', 'cut "here" by'),  # a body cut short
        (b"upstream connect error\nreset reason: overflow", "upstream connect error"),
        (b'{"error": {"code": 400}}', '{"error": {"code": 400}}'),  # no words: the body
        (b"  \n\n  ", None),
    ],
)
def test_the_message_of_an_error_answer(body: bytes, message: str | None) -> None:
    from tailreplay.replayer.results import target_message

    assert target_message(body.decode()) == message


def test_a_kept_message_is_one_redacted_line() -> None:
    from tailreplay.replayer.results import MESSAGE_CHARS, target_message

    said = target_message(
        json.dumps({"error": {"message": "bad prompt from bob@example.com: " + "word " * 100}})
    )
    assert said is not None and len(said) == MESSAGE_CHARS and said.endswith("…")
    assert "bob@example.com" not in said and said.startswith("bad prompt from [EMAIL:fp:")


@pytest.mark.parametrize(
    ("longest", "pinned", "context", "kv"),
    [
        (None, {}, 8_192, 480_000),  # nothing known: the profile as it is
        (5_000, {}, 8_192, 480_000),  # fits already: never shrunk
        (100_011, {}, 110_592, 480_000),  # x1.1, rounded up to 1,024
        (126_400, {}, 139_264, 557_056),  # KV grows to hold four of the longest
        (126_400, {"max_model_len": 50_000}, 50_000, 480_000),  # --sim-arg wins
        (126_400, {"kv_tokens": 100_000}, 139_264, 100_000),
    ],
)
def test_the_builtin_simulator_is_sized_to_the_longest_request(
    longest: int | None, pinned: dict[str, int], context: int, kv: int
) -> None:
    from tailreplay.sim.launcher import BuiltinSim

    sim = BuiltinSim("fast", overrides=tuple(pinned.items()))
    p = sim.sized(longest)
    assert (p.max_model_len, p.kv_tokens) == (context, kv)
