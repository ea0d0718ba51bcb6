"""A deterministic OpenAI-style upstream for byte-for-byte comparisons.

It follows OpenAI's documented behaviour exactly: the usage object nests its
details (``prompt_tokens_details.cached_tokens``,
``completion_tokens_details.reasoning_tokens``); with include_usage every chunk
carries "usage": null and a usage-only chunk comes before [DONE]. Events are
spaced 20 ms apart so streaming (not buffering) is visible.

The model ``deepseek-r1`` answers as DeepSeek-R1 does: ``reasoning_content``
deltas (its thoughts) stream before the ``content`` ones, and usage counts them
as ``reasoning_tokens`` inside ``completion_tokens``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

WORDS = ["Hello", " there", ",", " friend", "."]
THOUGHTS = ["Let", " me", " think"]
"""deepseek-r1's reasoning deltas, before WORDS."""
PROMPT_TOKENS, CACHED_TOKENS = 9, 4
GAP_S = 0.02
REQUESTS = web.AppKey("requests", list)


def usage(model: str) -> dict[str, Any]:
    """The usage object this upstream reports for ``model``, as OpenAI writes it."""
    reasoning = len(THOUGHTS) if model == "deepseek-r1" else 0
    completion = len(WORDS) + reasoning
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": completion,
        "total_tokens": PROMPT_TOKENS + completion,
        "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def non_stream(model: str) -> bytes:
    """The whole answer, for a request without ``stream``."""
    message: dict[str, Any] = {"role": "assistant", "content": "Hello there, friend."}
    if model == "deepseek-r1":
        message["reasoning_content"] = "".join(THOUGHTS)
    return _json(
        {
            "id": "chatcmpl-fixed",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "fixed",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage(model),
        }
    )


NON_STREAM = non_stream("fixed")


def _chunk(delta: dict[str, Any], finish: str | None, with_usage: bool) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-fixed",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "fixed",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if with_usage:
        body["usage"] = None
    return b"data: " + _json(body) + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[REQUESTS].append(body)
    return await answer(request, body)


async def answer(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    """This upstream's answer to a chat request whose body is ``body``."""
    model = body.get("model", "fixed")
    if not body.get("stream"):
        return web.Response(body=non_stream(model), content_type="application/json")
    with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    deltas = [{"reasoning_content": t} for t in THOUGHTS] if model == "deepseek-r1" else []
    deltas += [{"content": w} for w in WORDS]
    deltas[0] = {"role": "assistant", **deltas[0]}
    for delta in deltas:
        await resp.write(_chunk(delta, None, with_usage))
        await asyncio.sleep(GAP_S)
    await resp.write(_chunk({}, "stop", with_usage))
    if with_usage:
        tail = {
            "id": "chatcmpl-fixed",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "fixed",
            "choices": [],
            "usage": usage(model),
        }
        await resp.write(b"data: " + _json(tail) + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def fixed_app(client_max_size: int = 1 << 20) -> web.Application:
    app = web.Application(client_max_size=client_max_size)
    app[REQUESTS] = []
    app.router.add_post("/v1/chat/completions", chat)
    return app
