"""Token counts and first-token times as OpenAI and DeepSeek-R1 report them, through capture
and replay: exact counts from nested usage, reasoning timed apart from the answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import numpy as np
import openai
import pytest
from aiohttp import web

from tailreplay.replayer.config import ReplayConfig
from tailreplay.replayer.run import run
from tailreplay.replayer.schedule import ScheduleConfig
from tailreplay.replayer.speed import parse_speed
from tailreplay.sim.profiles import PROFILES
from tailreplay.sim.server import SimConfig, serve
from tailreplay.traces.archive.reader import ArchiveReader
from tests.fixed_upstream import (
    CACHED_TOKENS,
    GAP_S,
    PROMPT_TOKENS,
    THOUGHTS,
    WORDS,
    fixed_app,
    usage,
)
from tests.proxy_helpers import proxy_to, records, serve_app

CASES = [  # (model, stream, include_usage)
    (model, stream, include)
    for model in ("gpt-4o", "deepseek-r1")
    for stream, include in ((False, False), (True, True), (True, False))
]


async def _capture(tmp_path: Path) -> tuple[list, str]:
    """One request of each case through the proxy, with the openai SDK."""
    out = tmp_path / "cap"
    async with serve_app(fixed_app()) as up, proxy_to(up, out) as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        for model, stream, include in CASES:
            messages = [{"role": "user", "content": f"{model} {stream} {include}"}]
            if not stream:
                await client.chat.completions.create(model=model, messages=messages)
                continue
            extra = {"stream_options": {"include_usage": True}} if include else {}
            async for _ in await client.chat.completions.create(
                model=model, messages=messages, stream=True, **extra
            ):
                pass
        await client.close()
    return sorted(records(out), key=lambda r: r.start_ns), str(out)


def _check(r, model: str, stream: bool) -> None:  # type: ignore[no-untyped-def]
    want = usage("deepseek-r1" if model == "deepseek-r1" else "fixed")
    assert (r.status, r.error, r.tokens_source) == (200, None, "usage")
    assert (r.input_tokens, r.cached_tokens) == (PROMPT_TOKENS, CACHED_TOKENS)
    assert r.output_tokens == want["completion_tokens"]
    reasoning = want["completion_tokens_details"]["reasoning_tokens"]
    assert r.reasoning_tokens == reasoning
    if not stream:
        assert r.ttft_content_ns is None and r.chunk_gaps_us is None
        return
    # A gap between each two of the streamed tokens, about GAP_S. (On a busy machine a
    # token read late leaves a longer gap before it and a shorter one after: the
    # typical gap stays.)
    tokens = len(WORDS) + (len(THOUGHTS) if reasoning else 0)
    gaps = r.chunk_gaps_us
    assert len(gaps) == tokens - 1 and min(gaps) >= 0
    assert float(np.median(gaps)) >= GAP_S * 1e6 * 0.5, gaps
    if reasoning:  # the answer began after the thoughts: their gaps later
        assert r.ttft_content_ns - r.ttfb_ns >= sum(gaps[: len(THOUGHTS)]) * 1e3 - 1e3, gaps
    else:
        assert r.ttft_content_ns is None


async def test_capture_records_openai_and_r1_usage_exactly(tmp_path: Path) -> None:
    got, _ = await _capture(tmp_path)
    assert [(r.model, r.stream) for r in got] == [(m, s) for m, s, _ in CASES]
    for r, (model, stream, _) in zip(got, CASES, strict=True):
        _check(r, model, stream)


async def test_the_replay_measures_what_the_capture_did(tmp_path: Path) -> None:
    _, out = await _capture(tmp_path)
    archives = sorted(Path(out).glob("*.msgpack"))
    async with serve_app(fixed_app()) as target:
        config = ReplayConfig(
            schedule=ScheduleConfig(paths=archives, speed=parse_speed("10x"), tail_stretch=1.0),
            target=target,
            force_lengths=False,
            out=tmp_path / "replay.msgpack",
        )
        await run(config, lambda line: None)
    results = sorted(ArchiveReader([tmp_path / "replay.msgpack"]), key=lambda r: r.intended_ns)
    for r, (model, stream, _) in zip(results, CASES, strict=True):
        _check(r, model, stream)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_200_that_is_not_the_api_is_a_bad_response(tmp_path: Path, stream: bool) -> None:
    async def html(request: web.Request) -> web.Response:
        await request.read()
        kind = "text/event-stream" if stream else "text/html"
        body = "data: <html>maintenance</html>\n\n" if stream else "<html>maintenance</html>"
        return web.Response(text=body, content_type=kind)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", html)
    out = tmp_path / "cap"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    async with (
        serve_app(app) as up,
        proxy_to(up, out) as proxy,
        aiohttp.ClientSession() as session,
        session.post(proxy.url + "/v1/chat/completions", json=body) as resp,
    ):
        assert resp.status == 200  # passed on as it came
        await resp.read()
    (r,) = records(out)
    assert (r.status, r.error) == (200, "bad_response")
    # Replayed at the same target, the result says the same.
    async with serve_app(app) as target:
        config = ReplayConfig(
            schedule=ScheduleConfig(paths=sorted(out.glob("*.msgpack"))),
            target=target,
            out=tmp_path / "replay.msgpack",
            preflight=False,  # which would stop it before the request: tested elsewhere
        )
        outcome = await run(config, lambda line: None)
    (result,) = ArchiveReader([tmp_path / "replay.msgpack"])
    assert (result.status, result.error) == (200, "bad_response")
    assert outcome.summary.errors == {"bad_response": 1} and outcome.exit_code == 5


async def test_the_simulator_thinks_like_a_reasoning_model(tmp_path: Path) -> None:
    """``--reasoning-share 0.5``: half the chat requests think 12 tokens first; a capture
    through the proxy and a replay of it both time the answer apart and count the
    thinking exactly."""
    profile = PROFILES["default"].with_overrides(
        decode_base_ms=3.0, decode_per_seq_ms=0.0, prefill_base_ms=1.0,
        prefill_per_token_ms=0.0, reasoning_share=0.5, reasoning_tokens=12,
    )  # fmt: skip
    out = tmp_path / "cap"
    async with serve(SimConfig(profile=profile, seed=3, port=0)) as sim, proxy_to(sim, out) as p:
        client = openai.AsyncOpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0)
        for i in range(40):
            messages = [{"role": "user", "content": f"question {i}"}]
            if i % 2:
                await client.chat.completions.create(model="r1", messages=messages,
                                                     max_tokens=30)  # fmt: skip
                continue
            async for _ in await client.chat.completions.create(
                model="r1", messages=messages, max_tokens=30, stream=True
            ):
                pass
        await client.close()
        got = records(out)
        archives = sorted(out.glob("*.msgpack"))
        config = ReplayConfig(
            schedule=ScheduleConfig(paths=archives, speed=parse_speed("20x"), tail_stretch=1.0),
            target=sim,
            allow_upstream=True,  # the same simulator: a test, not production
            out=tmp_path / "replay.msgpack",
        )
        await run(config, lambda line: None)
    replayed = list(ArchiveReader([tmp_path / "replay.msgpack"]))
    for rs in (got, replayed):
        thinking = [r for r in rs if r.reasoning_tokens]
        assert 10 <= len(thinking) <= 30  # about half, chosen per request
        assert all(r.reasoning_tokens == 12 and r.output_tokens > 12 for r in thinking)
        assert all(r.tokens_source == "usage" for r in rs)
        for r in thinking:
            if r.stream:  # the answer's first token came twelve steps after the first
                assert r.ttft_content_ns - r.ttfb_ns >= 12 * 3e6 * 0.8
        plain = [r for r in rs if not r.reasoning_tokens]
        assert all(r.ttft_content_ns is None for r in plain)


async def test_capture_and_replay_measure_the_same_inter_token_gaps(tmp_path: Path) -> None:
    """An upstream that sends one token event every 10 ms: the recorded and the replayed
    inter-token latency are both 10 ms, measured by one routine (tailreplay/http/sse.py)."""

    async def tokens(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b": ping\n\n")  # a comment first: never a token
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(30):  # paced from one start, so sleep overshoot does not add up
            await asyncio.sleep(max(0.0, start + i * 0.010 - loop.time()))
            await resp.write(b'data: {"choices":[{"delta":{"content":"w"}}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", tokens)
    out = tmp_path / "cap"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with serve_app(app) as up, proxy_to(up, out) as proxy, aiohttp.ClientSession() as s:
        for _ in range(5):
            async with s.post(proxy.url + "/v1/chat/completions", json=body) as resp:
                await resp.read()
    async with serve_app(app) as target:
        config = ReplayConfig(
            schedule=ScheduleConfig(paths=sorted(out.glob("*.msgpack"))),
            target=target,
            out=tmp_path / "replay.msgpack",
        )
        await run(config, lambda line: None)
    for rs in (records(out), list(ArchiveReader([tmp_path / "replay.msgpack"]))):
        gaps = np.concatenate([r.chunk_gaps_us for r in rs]) / 1000
        assert len(gaps) == 5 * 29 and all(r.output_tokens == 30 for r in rs)
        assert abs(float(np.percentile(gaps, 50)) - 10.0) <= 1.0, sorted(gaps)
