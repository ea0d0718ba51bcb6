"""The dialect registry: what it lists, what each dialect reads of its published event
sequences, and what becomes of a route no dialect serves.

Adding a dialect is one module in ``tailreplay/dialects/`` and a line in ``DIALECTS``
(docs/architecture.md): ``test_the_registry_lists_every_dialect`` names them, and the
simulator, the proxy's tap, the replayer and the spans read them from there.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.dialects import DIALECTS, ROUTES, dialect_for, operation_name, route_label
from tailreplay.dialects.base import ANSWER, NOT_TOKEN, REASONING
from tailreplay.openai_api import parse_usage
from tailreplay.sim.server import SimConfig, build_app
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import UNBOUND
from tests.proxy_helpers import proxy_to, records, serve_app


def test_the_registry_lists_every_dialect() -> None:
    assert [(d.name, d.routes, d.operation) for d in DIALECTS] == [
        ("chat", ("/v1/chat/completions",), "chat"),
        ("completions", ("/v1/completions",), "text_completion"),
        ("responses", ("/v1/responses",), "chat"),
        ("embeddings", ("/v1/embeddings",), "embeddings"),
        ("messages", ("/v1/messages",), "chat"),
    ]
    routes = [r for d in DIALECTS for r in d.routes]
    assert len(routes) == len(set(routes))  # one dialect a route
    assert set(ROUTES) == {*routes, "/v1/models", "other"}
    assert dialect_for("/v1/messages?beta=true").name == "messages"  # type: ignore[union-attr]
    assert dialect_for("/v1/chat/completions/") is dialect_for("/v1/chat/completions")
    assert dialect_for("/v2/generate") is None
    assert route_label("/v2/generate") == "other"
    assert operation_name("/v1/embeddings") == "embeddings"
    assert operation_name("/v2/generate") is None


def test_a_route_no_dialect_serves_makes_an_http_span_not_a_genai_one() -> None:
    from tailreplay.exporters.spans import span_attributes, span_name
    from tailreplay.traces.archive.record import Record

    other = Record(start_ns=1, method="PUT", path="/v2/generate?tenant=a", model="m")
    assert span_name(other) == "PUT"
    attributes = span_attributes(other, provider="openai", server=None)
    assert "gen_ai.operation.name" not in attributes
    assert attributes["url.path"] == "/v2/generate"
    chat = Record(start_ns=1, method="POST", path="/v1/chat/completions", model="m")
    assert span_name(chat) == "chat m"
    assert span_attributes(chat, provider="openai", server=None)["gen_ai.operation.name"] == "chat"


def test_the_simulator_serves_every_dialects_routes() -> None:
    app = build_app(SimConfig())
    served = {r.resource.canonical for r in app.router.routes() if r.method == "POST"}
    assert served == {route for d in DIALECTS for route in d.routes}


def _event(data: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + json.dumps(data).encode() + b"\n\n"


# Each dialect's published stream, one event of each kind, with what it carries.
_RESPONSES = [
    ({"type": "response.created", "response": {"usage": None}}, NOT_TOKEN),
    ({"type": "response.reasoning_text.delta", "delta": "hm"}, REASONING),
    ({"type": "response.output_text.delta", "delta": "Hi"}, ANSWER),
    ({"type": "response.output_text.delta", "delta": ""}, NOT_TOKEN),
    ({"type": "response.function_call_arguments.delta", "delta": "{"}, ANSWER),
    ({"type": "response.output_text.done", "text": "Hi there"}, NOT_TOKEN),
    ({"type": "response.content_part.done", "part": {"type": "output_text", "text": "Hi"}}, 0),
    ({"type": "response.output_item.done", "item": {"content": [{"text": "Hi"}]}}, NOT_TOKEN),
    ({"type": "response.completed", "response": {"output": [{"text": "Hi"}]}}, NOT_TOKEN),
]


def _delta(kind: str, **fields: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": kind, **fields}}


_MESSAGES = [
    ({"type": "message_start", "message": {"content": [], "usage": {"input_tokens": 5}}}, 0),
    ({"type": "content_block_start", "content_block": {"type": "text", "text": ""}}, 0),
    ({"type": "ping"}, NOT_TOKEN),
    (_delta("thinking_delta", thinking="a"), REASONING),
    (_delta("signature_delta", signature="s"), NOT_TOKEN),
    (_delta("text_delta", text="Hi"), ANSWER),
    (_delta("text_delta", text=""), NOT_TOKEN),
    (_delta("input_json_delta", partial_json="{"), ANSWER),
    ({"type": "content_block_stop", "index": 0}, NOT_TOKEN),
    ({"type": "message_delta", "usage": {"output_tokens": 3}}, NOT_TOKEN),
    ({"type": "message_stop"}, NOT_TOKEN),
]


@pytest.mark.parametrize(
    ("path", "events"), [("/v1/responses", _RESPONSES), ("/v1/messages", _MESSAGES)]
)
def test_only_events_that_carry_generated_tokens_are_tokens(
    path: str, events: list[tuple[dict[str, Any], int]]
) -> None:
    dialect = dialect_for(path)
    assert dialect is not None
    for data, kind in events:
        assert dialect.token_kind(_event(data, str(data["type"]))) == kind, data["type"]


def test_anthropic_usage_counts_every_prompt_token_and_its_stop_reasons_read_as_openais() -> None:
    messages = dialect_for("/v1/messages")
    start = {"usage": {"input_tokens": 7, "cache_read_input_tokens": 90, "output_tokens": 1}}
    stream = (
        _event({"type": "message_start", "message": start})
        + _event({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}})
        + _event({"type": "message_delta", "usage": {"output_tokens": 40}})
    )
    usage = parse_usage(stream, None, messages)
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (97, 90, 40)
    assert usage.finish_reason == "length"
    embeddings = parse_usage(
        b'{"usage": {"prompt_tokens": 12, "total_tokens": 12}}', None, dialect_for("/v1/embeddings")
    )
    assert (embeddings.prompt_tokens, embeddings.completion_tokens) == (12, 0)


async def _raw_upstream(seen: list[tuple[str, bytes]]) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        seen.append((request.path_qs, await request.read()))
        return web.json_response({"ok": True, "usage": {"prompt_tokens": 3}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    return app


async def test_a_route_no_dialect_serves_passes_byte_exact_and_is_recorded_as_unknown(
    tmp_path: Path,
) -> None:
    body = b'{"model": "tgi", "inputs": "hello",  "parameters": {"max_new_tokens": 9}}'
    seen: list[tuple[str, bytes]] = []
    for bodies in ("none", "full"):
        out = tmp_path / bodies
        async with (
            serve_app(await _raw_upstream(seen)) as upstream,
            proxy_to(upstream, out, bodies=bodies) as proxy,
            aiohttp.ClientSession() as s,
            s.post(f"{proxy.url}/generate?x=1", data=body) as r,
        ):
            assert r.status == 200
            assert await r.json() == {"ok": True, "usage": {"prompt_tokens": 3}}
        await asyncio.sleep(0)
        (record,) = records(out)
        assert seen[-1] == ("/generate?x=1", body)  # byte for byte
        assert (record.path, record.status, record.method) == ("/generate?x=1", 200, "POST")
        assert record.duration_ns is not None and record.ttfb_ns is not None
        # Unknown: nothing guessed from the body or the answer.
        assert (record.model, record.stream, record.input_tokens, record.output_tokens) == (
            None,
            None,
            None,
            None,
        )
        assert record.req_body == (body if bodies == "full" else None)


def _replay(capture: Path, target: str, out: Path, *more: str) -> Any:
    return CliRunner().invoke(
        cli,
        [
            "replay",
            *more,
            *UNBOUND,
            "--speed",
            "1x",
            "--target",
            target,
            "--allow-upstream",
            "--out",
            str(out),
            str(capture),
        ],
    )


async def test_replay_sends_an_unknown_route_as_recorded_or_refuses_it_with_a_count(
    tmp_path: Path,
) -> None:
    body = b'{"inputs": "hello", "parameters": {"max_new_tokens": 9}}'
    seen: list[tuple[str, bytes]] = []
    async with serve_app(await _raw_upstream(seen)) as upstream:
        for bodies in ("full", "none"):
            out = tmp_path / bodies
            async with (
                proxy_to(upstream, out, bodies=bodies) as proxy,
                aiohttp.ClientSession() as s,
            ):
                for path in ("/generate", "/v1/models"):
                    method = "POST" if path == "/generate" else "GET"
                    url = f"{proxy.url}{path}"
                    async with s.request(method, url, data=body if method == "POST" else None):
                        pass
        seen.clear()
        done = await asyncio.to_thread(_replay, tmp_path / "full", upstream, tmp_path / "f.msgpack")
        assert done.exit_code == 0, done.output
        assert ("/generate", body) in seen  # as recorded
        seen.clear()
        summary = tmp_path / "n.json"
        done = await asyncio.to_thread(
            _replay, tmp_path / "none", upstream, tmp_path / "n.msgpack", "--json", str(summary)
        )
        assert done.exit_code == 0, done.output
        assert "1 records left out: POSTs to routes no dialect serves" in done.output
        assert json.loads(summary.read_text())["left_out"] == 1
        assert "/generate" not in [p for p, _ in seen]  # never sent empty
        assert [r.path for r in ArchiveReader([tmp_path / "n.msgpack"])] == ["/v1/models"]


def _feed(dialect_path: str, stream: bytes, step: int) -> tuple[int, int, bool, int]:
    from tailreplay.http.sse import StreamTimeline

    dialect = dialect_for(dialect_path)
    assert dialect is not None
    t = StreamTimeline(dialect)
    for i in range(0, len(stream), step):
        t.feed(stream[i : i + step], i)
    t.finish(len(stream))
    return t.tokens, t.reasoning, t.done, len(t.gaps_us)


def test_a_stream_reads_alike_whole_and_byte_by_byte() -> None:
    chat = b"".join(
        _event({"choices": [{"delta": {"content": w}}]}) for w in ("Hi", " [DONE]", " there")
    )
    chat += b"data: [DONE]\n\n"
    whole = _feed("/v1/chat/completions", chat, len(chat))
    assert whole == (3, 0, True, 2)  # "[DONE]" in the text ends nothing
    assert _feed("/v1/chat/completions", chat, 1) == whole
    messages = b"".join(_event(data, str(data["type"])) for data, _ in _MESSAGES)
    assert _feed("/v1/messages", messages, 1) == _feed("/v1/messages", messages, 10**6)
    late = _event({"sequence_number": 9, "type": "response.completed", "response": {}})
    assert _feed("/v1/responses", late, 1)[2]  # the closing type need not come first


def test_a_large_event_trickled_in_small_reads_costs_its_length() -> None:
    event = _event({"choices": [{"delta": {"content": "x" * (256 << 10)}}]})
    started = time.process_time()
    assert _feed("/v1/chat/completions", event, 16)[0] == 1
    # Linear: about 16,000 reads of a regex over 16 bytes. The quadratic reading took
    # 21 s of CPU here; 5 s leaves a busy machine room.
    assert time.process_time() - started < 5


@pytest.mark.parametrize("end", [b"\r", b"\r\n", b"\n"])
def test_every_line_end_the_sse_specification_allows_separates_events(end: bytes) -> None:
    chat = b"".join(_event({"choices": [{"delta": {"content": w}}]}) for w in "abc")
    chat = chat.replace(b"\n", end) + b"data: [DONE]" + end + end
    for step in (1, 2, 7, len(chat)):
        assert _feed("/v1/chat/completions", chat, step) == (3, 0, True, 2), step


@pytest.mark.parametrize("step", [1 << 10, 100_000, 3 << 20])
def test_an_event_over_a_mebibyte_is_counted_whole_and_those_after_it_too(step: int) -> None:
    huge = _event({"choices": [{"delta": {"content": "x" * (3 << 20)}}]})
    chat = _event({"choices": [{"delta": {"content": "a"}}]}) + huge + huge
    chat += _event({"choices": [{"delta": {"content": "b"}}]}) + b"data: [DONE]\n\n"
    assert _feed("/v1/chat/completions", chat, step) == (4, 0, True, 3)
    messages = _event(_delta("text_delta", text="y" * (2 << 20)), "content_block_delta")
    messages += _event({"type": "message_stop"}, "message_stop")
    assert _feed("/v1/messages", messages, 4096)[0::2] == (1, True)


def test_thinking_that_nests_its_text_is_thinking() -> None:
    chat = dialect_for("/v1/chat/completions")
    assert chat is not None
    openrouter = {"content": "", "reasoning": "hm", "reasoning_details": [{"text": "hm"}]}
    assert chat.token_kind(_event({"choices": [{"delta": openrouter}]})) == REASONING
    assert chat.token_kind(_event({"choices": [{"delta": {"content": "a"}}]})) == ANSWER


async def test_the_simulator_refuses_what_it_cannot_answer_with_400() -> None:
    from tailreplay.sim.server import serve

    async with serve(SimConfig(port=0)) as url, aiohttp.ClientSession() as s:
        for path, body in (
            ("/v1/chat/completions", b"[" * 5000),
            ("/v1/embeddings", json.dumps({"model": "m", "input": ["x"] * 3000}).encode()),
        ):
            async with s.post(url + path, data=body) as r:
                assert r.status == 400, path
        lone = b'{"model": "m", "input": "a\\ud800b"}'
        async with s.post(url + "/v1/embeddings", data=lone) as r:
            assert r.status == 200
        both = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        both |= {"max_tokens": 5, "max_completion_tokens": 9, "min_tokens": 9}
        async with s.post(url + "/v1/chat/completions", json=both) as r:
            # max_completion_tokens is the budget, as the proxy records it: 9 is allowed.
            assert r.status == 200 and (await r.json())["usage"]["completion_tokens"] == 9


def test_a_simulated_tool_calls_input_is_one_json_object_streamed_or_whole() -> None:
    import anthropic
    import openai

    from tailreplay.sim.launcher import sim_process

    ask: Any = [{"role": "user", "content": "Look it up."}]
    chat_tool: Any = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    responses_tool: Any = {"type": "function", "name": "lookup", "parameters": {}}
    messages_tool: Any = {"name": "lookup", "input_schema": {"type": "object"}}
    inputs: list[str] = []
    with sim_process(["--profile", "fast"]) as url:
        oa = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        an = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        chat: Any = {"model": "m", "messages": ask, "tools": [chat_tool], "max_tokens": 9}
        whole = oa.chat.completions.create(**chat, tool_choice="required")
        inputs.append(whole.choices[0].message.tool_calls[0].function.arguments)  # type: ignore[index,union-attr]
        pieces = [
            call.function.arguments or ""
            for chunk in oa.chat.completions.create(**chat, tool_choice="required", stream=True)
            for choice in chunk.choices
            for call in choice.delta.tool_calls or []
            if call.function is not None
        ]
        inputs.append("".join(pieces))
        responses: Any = {"model": "m", "input": ask, "tools": [responses_tool]}
        r = oa.responses.create(**responses, tool_choice="required", max_output_tokens=9)
        inputs += [o.arguments for o in r.output if o.type == "function_call"]
        deltas = [
            e.delta
            for e in oa.responses.create(**responses, tool_choice="required", stream=True)
            if e.type == "response.function_call_arguments.delta"
        ]
        inputs.append("".join(deltas))
        messages: Any = {"model": "c", "max_tokens": 9, "messages": ask, "tools": [messages_tool]}
        m = an.messages.create(**messages, tool_choice={"type": "any"})
        inputs += [json.dumps(b.input) for b in m.content if b.type == "tool_use"]
        with an.messages.stream(**messages, tool_choice={"type": "any"}) as s:
            partial = [
                e.delta.partial_json
                for e in s
                if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
            ]
        inputs.append("".join(partial))
    assert len(inputs) == 6
    for given in inputs:
        parsed = json.loads(given)  # what a client that runs the tool does first
        assert list(parsed) == ["text"] and parsed["text"].strip(), given
