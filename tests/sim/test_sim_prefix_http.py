"""The simulator's prefix cache over HTTP: cached_tokens in usage, the metrics, the flag."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.sim.profiles import PROFILES, EngineProfile
from tailreplay.sim.schema import render_chat
from tailreplay.sim.server import SimConfig, serve
from tailreplay.traces.text.tokens import count_tokens
from tests.helpers import metric

QUICK = PROFILES["default"].with_overrides(
    decode_base_ms=2.0, decode_per_seq_ms=0.0, prefill_base_ms=1.0, prefill_per_token_ms=0.0
)
SYSTEM = {"role": "system", "content": "You answer questions about this manual. " * 60}


def messages(question: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": question}]


def shared_tokens(a: list[dict[str, str]], b: list[dict[str, str]]) -> int:
    """Leading tokens the rendered prompts of ``a`` and ``b`` have in common."""
    from tailreplay.traces.text.tokens import get

    ta, tb = (get().encode_ordinary(render_chat(m)) for m in (a, b))
    n = 0
    while n < min(len(ta), len(tb)) and ta[n] == tb[n]:
        n += 1
    return n


async def sim(profile: EngineProfile) -> AsyncIterator[openai.AsyncOpenAI]:
    async with (
        serve(SimConfig(profile=profile, seed=1, port=0)) as url,
        openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client,
    ):
        yield client


@pytest.fixture
async def client() -> AsyncIterator[openai.AsyncOpenAI]:
    async for c in sim(QUICK):
        yield c


async def test_usage_reports_cached_tokens_streamed_and_not(client: openai.AsyncOpenAI) -> None:
    first, second = messages("What is chapter one about?"), messages("And chapter two?")
    a = await client.chat.completions.create(model="m", messages=first, max_tokens=3)
    assert a.usage is not None and a.usage.prompt_tokens_details is not None
    assert a.usage.prompt_tokens_details.cached_tokens == 0  # nothing cached yet
    # The second shares the system prompt: its full 16-token blocks are hits.
    common = shared_tokens(first, second)
    assert common > 400
    b = await client.chat.completions.create(model="m", messages=second, max_tokens=3)
    assert b.usage is not None and b.usage.prompt_tokens_details is not None
    assert b.usage.prompt_tokens_details.cached_tokens == common // 16 * 16
    # The same prompt again, streamed: everything but the last token's block is a hit.
    stream = await client.chat.completions.create(
        model="m", messages=second, max_tokens=3, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    usage = [chunk.usage async for chunk in stream if chunk.usage is not None]
    assert len(usage) == 1 and usage[0].prompt_tokens_details is not None
    n = usage[0].prompt_tokens
    assert n == count_tokens(render_chat(second))
    assert usage[0].prompt_tokens_details.cached_tokens == (n - 1) // 16 * 16
    # The counters, in tokens, as vLLM's: every prompt queried, the hits found.
    url = str(client.base_url).removesuffix("/v1/")
    queries = a.usage.prompt_tokens + 2 * n
    hits = common // 16 * 16 + (n - 1) // 16 * 16
    assert await metric(url, "vllm:prefix_cache_queries_total") == queries
    assert await metric(url, "vllm:prefix_cache_hits_total") == hits
    assert await metric(url, "vllm:gpu_prefix_cache_queries_total") == queries
    assert await metric(url, "vllm:gpu_prefix_cache_hits_total") == hits
    # vLLM's prompt-token counter counts whole prompts; prefill only what was computed.
    assert await metric(url, "vllm:prompt_tokens_total") == queries
    assert await metric(url, "tailreplay_sim_prefill_tokens_total") == queries - hits
    # The finished requests' blocks stay cached, and count as free.
    assert await metric(url, "vllm:kv_cache_usage_perc") == 0
    cached = await metric(url, "tailreplay_sim_prefix_cache_free_tokens")
    assert cached == (a.usage.prompt_tokens // 16 + n // 16 - common // 16) * 16


async def test_with_the_prefix_cache_off_usage_has_no_cached_tokens() -> None:
    async for client in sim(QUICK.with_overrides(prefix_caching=False)):
        for _ in range(2):
            r = await client.chat.completions.create(
                model="m", messages=messages("Why?"), max_tokens=2
            )
            assert r.usage is not None and r.usage.prompt_tokens_details is None
        url = str(client.base_url).removesuffix("/v1/")
        assert await metric(url, "vllm:prefix_cache_queries_total") == 0
        assert await metric(url, "vllm:prompt_tokens_total") == 2 * r.usage.prompt_tokens
        # Streamed with usage: the usage chunk has no details either.
        body = {"model": "m", "messages": messages("Why?"), "max_tokens": 2, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        async with (
            aiohttp.ClientSession() as s,
            s.post(url + "/v1/chat/completions", json=body) as resp,
        ):
            lines = [line async for line in resp.content if line.startswith(b"data: {")]
        usage = json.loads(lines[-1][len(b"data: ") :])["usage"]
        assert usage["prompt_tokens"] == r.usage.prompt_tokens
        assert "prompt_tokens_details" not in usage


def test_a_bad_block_size_is_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(cli, ["sim", "--block-size", "0"])
    assert result.exit_code == 2
    assert "block_size must be at least 1, not 0" in result.output
    assert "Traceback" not in result.output
