"""A credential of every provider format (``provider_formats.json``) through the real
proxy process, in every body mode with ``--otlp-capture-content``: none reaches the
archive (its request bodies aside in ``full`` mode, kept by the user's choice), the
proxy's output, ``/metrics`` or the spans.

Each format's credential goes in two chat requests, beside one of its format's
keywords: in the prompt, in a tool call's arguments, and (on one line) in a header
and a query parameter under names of no credential. The upstream answers with the
prompt: once streamed, three characters an event, so the answer holds the
credential split across events (the proxy counts a streamed answer's tokens and
keeps no text of it), once whole, which the span's ``gen_ai.output.messages``
carries.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from tests.otlp_receiver import receiver
from tests.proxy.test_redaction_corpus import _proxy, _wait_for_spans, forms
from tests.proxy.test_secret_corpus_proxy import _without_bodies
from tests.proxy_helpers import records, serve_app
from tests.traces.text.test_provider_formats import FORMATS, UNDRAWN, _drawn

PIECE = 3  # characters of the answer an SSE event carries


def _placed() -> list[tuple[str, list[str], str, str | None]]:
    """(format id, its credentials, the prompt, a one-line note or None) per format."""
    out = []
    for index, fmt in enumerate(FORMATS):
        if fmt.id in UNDRAWN:
            continue
        text, secrets, keyword = _drawn(index)
        inline = f"{keyword} {text}"
        one_line = "\n" not in text and fmt.pattern.search(inline + " x") is not None
        out.append(
            (fmt.id, secrets, f"{keyword} said\n{text}\ntoday", inline if one_line else None)
        )
    return out


PLACED = _placed()


async def _echo(request: web.Request) -> web.StreamResponse:
    """The prompt back: whole, or as an OpenAI chat stream, ``PIECE`` characters an
    event."""
    body = await request.json()
    text = " ".join(m["content"] for m in body["messages"] if m.get("content"))
    if not body.get("stream"):
        message = {"role": "assistant", "content": text}
        usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return web.json_response({"choices": [choice], "usage": usage})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for i in range(0, len(text), PIECE):
        delta = {"choices": [{"index": 0, "delta": {"content": text[i : i + PIECE]}}]}
        await response.write(f"data: {json.dumps(delta)}\n\n".encode())
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}
    await response.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
    return response


def _request(prompt: str, note: str | None, stream: bool) -> tuple[str, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"}
    path = "/v1/chat/completions"
    if note is not None:
        headers["X-Note"] = note
        path += "?note=" + quote(note, safe="")
    function = {"name": "f", "arguments": json.dumps({"note": prompt})}
    tool_call = {"id": "c", "type": "function", "function": function}
    body = {
        "model": "m",
        "stream": stream,
        "max_tokens": 4,
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        ],
    }
    return path, headers, json.dumps(body).encode()


@pytest.mark.parametrize("bodies", ["none", "redacted", "full"])
async def test_no_providers_credential_leaves_the_proxy(tmp_path: Path, bodies: str) -> None:
    out = tmp_path / "out"
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _echo)
    limit = asyncio.Semaphore(8)
    async with serve_app(app) as upstream, receiver() as otlp:
        # --shed-after off: every record whole (a shed one carries no prompt to check).
        args = ["--bodies", bodies, "--otlp-endpoint", otlp.url, "--otlp-capture-content"]
        args += ["--shed-after", "off"]
        async with _proxy(upstream, out, args) as (url, admin), aiohttp.ClientSession() as s:

            async def send(prompt: str, note: str | None, stream: bool) -> str:
                path, headers, body = _request(prompt, note, stream)
                async with (
                    limit,
                    s.post(URL(url + path, encoded=True), data=body, headers=headers) as r,
                ):
                    assert r.status == 200, await r.text()
                    return (await r.read()).decode()

            sent = [(p, n, stream) for _, _, p, n in PLACED for stream in (True, False)]
            answers = await asyncio.gather(*(send(*one) for one in sent))
            async with s.get(admin + "/metrics") as r:
                metrics = await r.read()
        await _wait_for_spans(otlp, len(sent))

    archive = b"".join(p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file())
    outputs = {
        "archive": _without_bodies(out) if bodies == "full" else archive,
        "stdout": (tmp_path / "stdout.txt").read_bytes(),
        "stderr": (tmp_path / "stderr.txt").read_bytes(),
        "/metrics": metrics,
        "spans": b"".join(otlp.raw),
    }
    leaks = sorted(
        {
            f"{format_id} in {where}"
            for format_id, secrets, _, _ in PLACED
            for secret in secrets
            for where, data in outputs.items()
            if any(f in data for f in forms(secret.strip("\"'")))
        }
    )
    assert not leaks, f"{len(leaks)} leaks: {', '.join(leaks[:12])}"
    # The test could fail: the streamed answers came in pieces (the credential split
    # across events), every request is recorded and exported, its content included:
    # every prompt holds a credential, so every span's prompt holds a mask, and so
    # does every whole answer's.
    assert all(a.count("data: ") > 10 for a in answers[::2])
    assert len(records(out)) == len(sent) and len(otlp.spans) >= len(sent)
    prompts = [str(s.attributes.get("gen_ai.input.messages", "")) for s in otlp.spans]
    outputs_seen = [str(s.attributes.get("gen_ai.output.messages", "")) for s in otlp.spans]
    assert sum(":fp:" in p for p in prompts) == len(sent)
    assert sum(":fp:" in a for a in outputs_seen) == len(PLACED)
