"""Clients see exactly what they would see direct; every exchange is recorded exactly."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from tailreplay.dialects.prompt_text import chat_text
from tailreplay.proxy.openai import SseRelay, with_usage_requested
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.text.tokens import count_tokens
from tests.fixed_upstream import GAP_S, NON_STREAM, WORDS, fixed_app
from tests.proxy_helpers import proxy_to, records, serve_app

BODY = {"model": "fixed", "messages": [{"role": "user", "content": "hi"}]}


async def _raw(url: str, body: dict) -> tuple[bytes, list[float]]:
    """The response bytes and the arrival time of each read."""
    stamps: list[float] = []
    chunks: list[bytes] = []
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body) as r:
        async for chunk in r.content.iter_any():
            stamps.append(time.monotonic())
            chunks.append(chunk)
    return b"".join(chunks), stamps


@pytest.mark.parametrize(
    "body",
    [
        BODY,
        {**BODY, "stream": True},
        {**BODY, "stream": True, "stream_options": {"include_usage": True}},
    ],
    ids=["non-streaming", "stream-without-usage", "stream-with-usage"],
)
async def test_bytes_are_identical_to_going_direct(tmp_path: Path, body: dict) -> None:
    async with serve_app(fixed_app()) as upstream:
        direct, _ = await _raw(upstream, body)
        async with proxy_to(upstream, tmp_path / "out") as proxy:
            proxied, stamps = await _raw(proxy.url, body)
    assert proxied == direct
    if not body.get("stream"):
        assert proxied == NON_STREAM
    else:
        # Streamed as it came: the reads span the upstream's pacing, not one burst.
        assert stamps[-1] - stamps[0] >= GAP_S * (len(WORDS) - 1) * 0.8
        assert (b'"usage":null' in proxied) == ("stream_options" in body)
    (record,) = records(tmp_path / "out")
    assert record.input_tokens == 9 and record.output_tokens == 5
    assert record.tokens_source == "usage" and record.finish_reason == "stop"


async def test_openai_sdk_sees_the_same_chunks_and_no_usage_it_did_not_ask_for(
    tmp_path: Path,
) -> None:
    async def chunks(base: str) -> list[dict]:
        async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="k", max_retries=0) as client:
            stream = await client.chat.completions.create(
                model="fixed", messages=BODY["messages"], stream=True
            )
            return [c.model_dump() async for c in stream]

    async with serve_app(fixed_app()) as upstream:
        direct = await chunks(upstream)
        async with proxy_to(upstream, tmp_path / "out") as proxy:
            proxied = await chunks(proxy.url)
    assert proxied == direct
    assert all(c["usage"] is None for c in proxied)
    assert len(proxied) == len(WORDS) + 1


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with sim_process(
        ["--seed", "4", "--decode-base-ms", "3", "--prefill-base-ms", "1", "--output-mean", "24"]
    ) as url:
        yield url


async def test_500_mixed_requests_give_500_exact_records(tmp_path: Path, sim_url: str) -> None:
    rng = random.Random(9)
    sent: dict[bytes, dict] = {}
    out = tmp_path / "out"
    async with proxy_to(sim_url, out) as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        gate = asyncio.Semaphore(25)

        async def one(i: int) -> None:
            trace_id = rng.randbytes(16)
            headers = {"traceparent": f"00-{trace_id.hex()}-{rng.randbytes(8).hex()}-01"}
            messages = [
                {"role": "user", "content": f"question {i} " + "word " * rng.randint(0, 300)}
            ]
            kind = i % 4
            seen: dict = {"kind": kind, "messages": messages}
            async with gate:
                if kind == 0:
                    r = await client.chat.completions.create(
                        model="m", messages=messages, extra_headers=headers
                    )
                    seen["usage"] = (r.usage.prompt_tokens, r.usage.completion_tokens)
                elif kind in (1, 2):
                    extra = {"stream_options": {"include_usage": True}} if kind == 1 else {}
                    stream = await client.chat.completions.create(
                        model="m", messages=messages, stream=True, extra_headers=headers, **extra
                    )
                    content, usage = 0, None
                    async for c in stream:
                        if c.usage is not None:
                            usage = (c.usage.prompt_tokens, c.usage.completion_tokens)
                        elif c.choices and c.choices[0].delta.content:
                            content += 1
                    seen["usage"], seen["content_chunks"] = usage, content
                else:
                    r2 = await client.completions.create(
                        model="m", prompt=messages[0]["content"], extra_headers=headers
                    )
                    seen["usage"] = (r2.usage.prompt_tokens, r2.usage.completion_tokens)
            sent[trace_id] = seen

        await asyncio.gather(*(one(i) for i in range(500)))
        await client.close()

    got = records(out)
    assert len(got) == 500
    by_trace = {r.trace_id: r for r in got}
    assert set(by_trace) == set(sent)
    for trace_id, seen in sent.items():
        r = by_trace[trace_id]
        assert r.status == 200 and r.error is None
        assert r.ttfb_ns is not None and r.duration_ns is not None and r.ttfb_ns < r.duration_ns
        assert r.tokens_source == "usage"
        if seen["kind"] == 2:
            assert seen["usage"] is None  # the client saw no usage chunk...
            assert r.output_tokens == seen["content_chunks"]  # ...yet the record is exact
            assert r.input_tokens == count_tokens(chat_text(seen["messages"]))
        else:
            assert (r.input_tokens, r.output_tokens) == seen["usage"]
        assert r.stream == (seen["kind"] in (1, 2))
        if r.stream:  # one token an event: a gap between each two
            assert len(r.chunk_gaps_us or []) == r.output_tokens - 1
        assert r.prefix_hashes and r.session is not None


@given(
    cuts=st.lists(st.integers(min_value=1, max_value=2000), max_size=12),
    end=st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r"]),
)
def test_usage_removal_does_not_depend_on_how_the_stream_is_cut(
    cuts: list[int], end: bytes
) -> None:
    # However the upstream's bytes are split into reads, and whichever line end the
    # SSE specification allows it uses, the client gets each event as soon as it is
    # whole, as it would have without the injected include_usage.
    words = [b"Hello", b" there", b",", b" friend"]
    chunk = b'data: {"choices":[{"delta":{"content":"%s"}}]%s}' + end
    injected = [chunk % (w, b',"usage":null') for w in words]
    injected += [b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}}' + end]
    injected += [b"data: [DONE]" + end]
    wanted = [chunk % (w, b"") for w in words] + [b"data: [DONE]" + end]
    stream = b"".join(injected)
    relay, out, at = SseRelay(), bytearray(), 0
    for cut in [*sorted({min(c, len(stream)) for c in cuts}), len(stream)]:
        out += relay.feed(stream[at:cut])
        at = cut
        whole = stream[:cut].count(end)  # events the client could have by now
        assert bytes(out) == b"".join(wanted[: whole - (whole > len(words))])
    out += relay.flush()
    assert bytes(out) == b"".join(wanted)
    assert relay.usage_event is not None and b'"prompt_tokens":9' in relay.usage_event


async def test_a_client_that_expects_100_continue_gets_it_at_once(tmp_path: Path) -> None:
    """curl sends ``Expect: 100-continue`` before a body over 1 MB and waits a second
    for the go-ahead: the proxy gives it at once, and the upstream gets the body whole,
    without the Expect it has no part in."""
    from aiohttp import web

    seen: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Expect"))
        return web.json_response({"bytes": len(await request.read())})

    app = web.Application(client_max_size=4 << 20)
    app.router.add_post("/v1/chat/completions", answer)
    body = b'{"model": "m", "messages": []}'
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    async with serve_app(app) as upstream, proxy_to(upstream, tmp_path / "o") as proxy:
        host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(head)
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2.0)
        writer.write(body)
        final = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
        writer.close()
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert final.startswith(b"HTTP/1.1 200")
    assert seen == [None]


RAW_BODIES = [
    # Not ASCII (escaped, it would double in size), a number past a double, a duplicate
    # key and a number's own spelling: each reaches the upstream as the client wrote it.
    '{"model":"fixed","stream":true,"messages":[{"role":"user","content":"你好 😀"}],'
    '"temperature":1e400}',
    '  {"model":"fixed","stream":false,"stream":true,"messages":[],"top_p":1E0}',
]


@pytest.mark.parametrize("raw", RAW_BODIES, ids=["utf8-and-1e400", "duplicate-key"])
async def test_usage_is_asked_for_in_the_client_s_own_bytes(tmp_path: Path, raw: str) -> None:
    seen: list[bytes] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        seen.append(await request.read())
        return web.Response(body=b"data: [DONE]\n\n", content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with serve_app(app) as upstream, proxy_to(upstream, tmp_path / "out") as proxy:
        headers = {"Content-Type": "application/json"}
        async with aiohttp.ClientSession() as s:
            url = proxy.url + "/v1/chat/completions"
            async with s.post(url, data=raw.encode(), headers=headers) as r:
                assert r.status == 200
                await r.read()
    start = raw.index("{") + 1
    asked = raw[:start] + '"stream_options":{"include_usage":true},' + raw[start:]
    assert seen == [asked.encode()]


def test_the_client_s_own_stream_options_are_changed_in_place_or_not_at_all() -> None:
    path = "/v1/chat/completions"
    own = b'{"stream":true, "stream_options" : {"include_usage":false,"x":"}"} ,"n":1E0}'
    changed = with_usage_requested(path, own)
    assert changed is not None
    assert changed.startswith(b'{"stream":true, "stream_options" : {') and changed.endswith(
        b' ,"n":1E0}'
    )
    assert json.loads(changed)["stream_options"] == {"include_usage": True, "x": "}"}
    # The key twice (once nested): which one is the top level's is not guessed.
    nested = b'{"stream":true,"stream_options":{},"metadata":{"stream_options":{}}}'
    assert with_usage_requested(path, nested) is None
    assert with_usage_requested(path, b'{"stream":true,"stream_options":null}') is None


async def test_a_body_of_megabytes_keeps_its_fields_in_the_record(tmp_path: Path) -> None:
    """A request with an image runs to megabytes: past what the request path parses
    (no usage asked for), its record still has the model, the stream flag and the
    stream's tokens, read by the recorder."""
    image = "data:image/png;base64," + "iVBORw0KGgo" * 420_000  # 4.6 MB
    content = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": image}}]
    body = {**BODY, "stream": True, "messages": [{"role": "user", "content": content}]}
    async with (
        serve_app(fixed_app(client_max_size=16 << 20)) as upstream,
        proxy_to(upstream, tmp_path / "out", max_body=16 << 20) as proxy,
    ):
        proxied, _ = await _raw(proxy.url, body)
    assert len(json.dumps(body)) > 4 << 20 and b"[DONE]" in proxied
    (record,) = records(tmp_path / "out")
    assert (record.model, record.stream, record.output_tokens) == ("fixed", True, len(WORDS))
    assert record.tokens_source == "estimate"
