"""A deterministic OpenAI-style upstream for byte-for-byte comparisons.

It follows OpenAI's documented include_usage behaviour exactly: with it, every
chunk carries "usage": null and a usage-only chunk comes before [DONE]. Events
are spaced 20 ms apart so streaming (not buffering) is visible.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

WORDS = ["Hello", " there", ",", " friend", "."]
NON_STREAM = (
    b'{"id":"chatcmpl-fixed","object":"chat.completion","created":1700000000,"model":"fixed",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, friend."},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}'
)
GAP_S = 0.02
REQUESTS = web.AppKey("requests", list)


def _chunk(delta: dict, finish: str | None, with_usage: bool) -> bytes:
    body: dict = {
        "id": "chatcmpl-fixed",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "fixed",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if with_usage:
        body["usage"] = None
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[REQUESTS].append(body)
    if not body.get("stream"):
        return web.Response(body=NON_STREAM, content_type="application/json")
    usage = bool((body.get("stream_options") or {}).get("include_usage"))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i, word in enumerate(WORDS):
        delta = {"role": "assistant", "content": word} if i == 0 else {"content": word}
        await resp.write(_chunk(delta, None, usage))
        await asyncio.sleep(GAP_S)
    await resp.write(_chunk({}, "stop", usage))
    if usage:
        tail = {
            "id": "chatcmpl-fixed",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "fixed",
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14},
        }
        await resp.write(b"data: " + json.dumps(tail, separators=(",", ":")).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def fixed_app() -> web.Application:
    app = web.Application()
    app[REQUESTS] = []
    app.router.add_post("/v1/chat/completions", chat)
    return app
