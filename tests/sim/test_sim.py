"""The simulator against the real openai SDK and raw HTTP: shape, determinism, errors."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from tailreplay.sim.faults import Faults
from tailreplay.sim.profiles import PROFILES
from tailreplay.sim.schema import render_chat
from tailreplay.sim.server import SimConfig, serve
from tailreplay.traces.text.tokens import count_tokens
from tests.helpers import metric

# Fast steps keep these tests quick; timing fidelity has its own tests.
QUICK = PROFILES["default"].with_overrides(
    decode_base_ms=2.0, decode_per_seq_ms=0.0, prefill_base_ms=1.0, prefill_per_token_ms=0.0
)
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Summarise the plot of Hamlet in one sentence, please."},
]


@pytest.fixture
async def sim_url() -> AsyncIterator[str]:
    async with serve(SimConfig(profile=QUICK, seed=5, port=0)) as url:
        yield url


def _client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)


@pytest.fixture
async def client(sim_url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    # Closed here: an SDK client left to the garbage collector closes itself on
    # whichever event loop runs then (a later test's), or fails on a closed one.
    async with _client(sim_url) as c:
        yield c


async def test_openai_sdk_streaming_with_usage(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="llama", messages=MESSAGES, max_tokens=40, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    content_chunks, usage, finish = 0, None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        choice = chunk.choices[0]
        if choice.delta.content:
            content_chunks += 1
        finish = choice.finish_reason or finish
    assert usage is not None
    assert usage.completion_tokens == content_chunks > 0
    assert usage.prompt_tokens == count_tokens(render_chat(MESSAGES))
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert finish in ("stop", "length")


async def test_openai_sdk_non_streaming_and_completions(client: openai.AsyncOpenAI) -> None:
    chat = await client.chat.completions.create(
        model="llama", messages=MESSAGES, max_tokens=7, extra_body={"ignore_eos": True}
    )
    assert chat.object == "chat.completion" and chat.model == "llama"
    assert chat.usage is not None and chat.usage.completion_tokens == 7
    assert chat.choices[0].finish_reason == "length"
    assert len(chat.choices[0].message.content.split()) == 7
    comp = await client.completions.create(model="llama", prompt="Once upon a time", max_tokens=5)
    assert comp.usage is not None and comp.usage.prompt_tokens == count_tokens("Once upon a time")
    assert 1 <= comp.usage.completion_tokens <= 5
    models = await client.models.list()
    assert [m.id for m in models.data] == [QUICK.served_model]


async def _raw_stream(url: str, body: dict) -> list[str]:
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        text = (await r.read()).decode()
    return [e[len("data: ") :] for e in text.split("\n\n") if e]


async def test_stream_without_include_usage_has_no_usage_chunk(sim_url: str) -> None:
    body = {
        "model": "m",
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": 12,
        "ignore_eos": True,
    }
    events = await _raw_stream(sim_url, body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("usage" not in c for c in chunks)
    content = [c for c in chunks if c["choices"][0]["delta"].get("content")]
    assert len(content) == 12
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    # With include_usage: exactly one usage chunk, just before [DONE].
    events = await _raw_stream(sim_url, {**body, "stream_options": {"include_usage": True}})
    chunks = [json.loads(e) for e in events[:-1]]
    with_usage = [c for c in chunks if c.get("usage")]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1]
    assert with_usage[0]["usage"]["completion_tokens"] == 12


async def test_min_tokens_and_max_completion_tokens(client: openai.AsyncOpenAI) -> None:
    r = await client.chat.completions.create(
        model="m", messages=MESSAGES, max_completion_tokens=300, extra_body={"min_tokens": 250}
    )
    assert r.usage is not None and 250 <= r.usage.completion_tokens <= 300


async def test_deterministic_for_a_seed() -> None:
    async def answers(seed: int) -> list[tuple[str, int]]:
        short = QUICK.with_overrides(output_mean=20.0)
        config = SimConfig(profile=short, seed=seed, port=0)
        async with serve(config) as url, _client(url) as client:
            out = []
            for i in range(6):
                msgs = [{"role": "user", "content": f"question {i}"}]
                r = await client.chat.completions.create(model="m", messages=msgs)
                assert r.usage is not None
                out.append((r.choices[0].message.content or "", r.usage.completion_tokens))
            return out

    first, again, other = await answers(11), await answers(11), await answers(12)
    assert first == again
    assert first != other
    assert len({n for _, n in first}) > 1  # lengths are drawn, not constant


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (json.dumps({"model": "m", "messages": "hi"}).encode(), "'messages' must be"),
        (json.dumps({"model": "m", "messages": [{"content": "x"}]}).encode(), "'role'"),
        (json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": "10"}).encode(), "integer"),
        (json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 0}).encode(), "at least 1"),
        (
            json.dumps({"model": "m", "messages": MESSAGES, "stream": "yes"}).encode(),
            "must be a boolean",
        ),
        (json.dumps({"model": "m", "messages": MESSAGES, "n": 2}).encode(), "n=1"),
        (
            json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": "word " * 9000}]}
            ).encode(),
            "maximum context length",
        ),
    ],
    ids=[
        "json",
        "array",
        "messages-type",
        "no-role",
        "max-tokens-type",
        "max-tokens-0",
        "stream-type",
        "n",
        "too-long",
    ],
)
async def test_bad_requests_get_400_with_an_error_body(
    sim_url: str, body: bytes, message: str
) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.post(sim_url + "/v1/chat/completions", data=body) as r:
            assert r.status == 400
            err = (await r.json())["error"]
            assert message in err["message"] and err["type"] == "invalid_request_error"
        async with s.get(sim_url + "/health") as r:
            assert r.status == 200


async def test_client_disconnect_frees_its_slot_and_kv(sim_url: str) -> None:
    body = {
        "model": "m",
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": 5000,
        "ignore_eos": True,
    }
    session = aiohttp.ClientSession()
    resp = await session.post(sim_url + "/v1/chat/completions", json=body)
    await resp.content.readline()
    assert await metric(sim_url, "vllm:num_requests_running") == 1
    assert await metric(sim_url, "vllm:kv_cache_usage_perc") > 0
    resp.close()
    await session.close()
    deadline = time.monotonic() + 10
    while await metric(sim_url, "vllm:num_requests_running") != 0:
        assert time.monotonic() < deadline, "the slot was never freed"
        await asyncio.sleep(0.05)
    assert await metric(sim_url, "vllm:kv_cache_usage_perc") == 0
    assert await metric(sim_url, "tailreplay_sim_client_aborts_total") == 1


async def test_queue_full_gets_429_with_retry_after() -> None:
    tiny = QUICK.with_overrides(max_num_seqs=1, queue_limit=2, decode_base_ms=50.0)
    async with serve(SimConfig(profile=tiny, port=0)) as url:
        body = {"model": "m", "messages": MESSAGES, "max_tokens": 20, "ignore_eos": True}
        async with aiohttp.ClientSession() as s:

            async def post() -> tuple[int, str | None, dict]:
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    return r.status, r.headers.get("Retry-After"), await r.json()

            first = asyncio.ensure_future(post())
            while await metric(url, "vllm:num_requests_running") != 1:
                await asyncio.sleep(0.005)
            # One running, so two may wait and the other five are turned away.
            results = [*await asyncio.gather(*(post() for _ in range(7))), await first]
    statuses = sorted(status for status, _, _ in results)
    assert statuses.count(200) == 3 and statuses.count(429) == 5
    for status, retry, payload in results:
        if status == 429:
            assert retry == "1" and payload["error"]["type"] == "rate_limit_error"


async def test_faults_errors_resets_and_stalls() -> None:
    body = {
        "model": "m",
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": 30,
        "ignore_eos": True,
    }
    async with (
        serve(SimConfig(profile=QUICK, port=0, faults=Faults(error_rate=1.0))) as url,
        aiohttp.ClientSession() as s,
        s.post(url + "/v1/chat/completions", json=body) as r,
    ):
        assert r.status == 500 and "injected" in (await r.json())["error"]["message"]
    async with (
        serve(SimConfig(profile=QUICK, port=0, faults=Faults(reset_rate=1.0, seed=3))) as url,
        aiohttp.ClientSession() as s,
    ):
        with pytest.raises(aiohttp.ClientError):
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                await r.read()
        async with s.get(url + "/health") as r:
            assert r.status == 200
    async with (
        serve(SimConfig(profile=QUICK, port=0, faults=Faults(stall_ms=300))) as url,
        aiohttp.ClientSession() as s,
    ):
        t0 = time.monotonic()
        async with s.post(url + "/v1/chat/completions", json=body) as r:
            await r.content.readline()
            assert time.monotonic() - t0 >= 0.3
