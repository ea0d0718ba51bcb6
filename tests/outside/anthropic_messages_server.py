"""Standalone fake of the Anthropic Messages API (POST /v1/messages), for black-box tests.

Written only from Anthropic's public documentation:
  * "Streaming Messages"  https://docs.claude.com/en/api/messages-streaming
    (also https://platform.claude.com/docs/en/build-with-claude/streaming)
    - every SSE event carries an `event:` name matching the `type` in its JSON data;
    - flow: message_start (Message with empty content, stop_reason null,
      usage {input_tokens, output_tokens: 1}), then per block content_block_start /
      content_block_delta... / content_block_stop, a `ping`, one message_delta
      (stop_reason, stop_sequence, cumulative usage.output_tokens), message_stop;
    - delta types text_delta {text}, input_json_delta {partial_json},
      thinking_delta {thinking}, signature_delta {signature} (just before the
      thinking block's content_block_stop);
    - error event: `event: error` / {"type":"error","error":{"type":..,"message":..}}.
  * "HTTP errors" / "Error shapes"  https://docs.anthropic.com/claude/reference/errors-and-rate-limits
    (400 invalid_request_error, {"type":"error","error":{"type","message"}}, `request-id` header).
  * "Building with extended thinking"
    https://docs.anthropic.com/claude/docs/build-with-claude/extended-thinking
    (thinking: {"type":"enabled","budget_tokens":N}; thinking blocks precede text blocks,
    carry `thinking` and `signature`; thinking tokens count as output tokens).
  * Messages API reference, Message object: id, type "message", role "assistant", content,
    model, stop_reason (end_turn | max_tokens | tool_use ...), stop_sequence, usage
    {input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens}.

Deliberately lenient (not enforced although documented): x-api-key, the budget_tokens
range (>= 1024 and < max_tokens), and the incompatibility of forced tool_choice with thinking.

Input token rule (deterministic, NOT Claude's tokenizer): build the canonical prompt text
  = system text, then for every message every piece of text it carries (string content;
  text of "text" blocks; "thinking" of thinking blocks; name + JSON(input) of tool_use blocks;
  tool_result content string / text blocks), then JSON of `tools`
  (json.dumps(tools, sort_keys=True, separators=(",", ":"))), joined with "\n";
input_tokens = number of matches of the regex  \w+|[^\w\s]  over that text.

Output: natural = 20 + int(sha256(canonical text)) % 40; n = min(max_tokens, natural) output
tokens, one per delta event (signature_delta is not a token). With thinking, the first
min(budget_tokens, 8, n) tokens are thinking. Forced tool (tool_choice any/tool) -> tool_use
block whose JSON input is split into the remaining tokens, stop_reason "tool_use"; else text,
stop_reason "max_tokens" if max_tokens < natural, else "end_turn".
Timing: first delta after --first-token-ms, then one every --token-ms; non-streamed requests
wait the same total time.
"""
import argparse
import asyncio
import base64
import hashlib
import json
import re
import uuid

from aiohttp import web

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
WORDS = ("the quick brown fox jumps over a lazy dog while replay servers stream "
         "tokens to curious clients and tests check every event carefully").split()
THOUGHTS = "let me think about this request step by step before answering it".split()


def count_tokens(text):
    return len(TOKEN_RE.findall(text))


def _block_text(block):
    t = block.get("type")
    if t == "text":
        return [block.get("text", "")]
    if t == "thinking":
        return [block.get("thinking", "")]
    if t == "tool_use":
        return [block.get("name", ""), json.dumps(block.get("input", {}), sort_keys=True)]
    if t == "tool_result":
        c = block.get("content", "")
        return [c] if isinstance(c, str) else [x.get("text", "") for x in c if isinstance(x, dict)]
    return []


def prompt_text(body):
    parts = []
    system = body.get("system")
    if isinstance(system, str):
        parts.append(system)
    elif isinstance(system, list):
        parts += [b.get("text", "") for b in system]
    for m in body["messages"]:
        c = m["content"]
        parts += [c] if isinstance(c, str) else [s for b in c for s in _block_text(b)]
    if body.get("tools"):
        parts.append(json.dumps(body["tools"], sort_keys=True, separators=(",", ":")))
    return "\n".join(parts)


def validate(request, body):
    """Return an error message, or None when the request is acceptable."""
    if not request.headers.get("anthropic-version"):
        return "anthropic-version: header is required"
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required (string)"
    mt = body.get("max_tokens")
    if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
        return "max_tokens: Field required (positive integer)"
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return "messages: Field required (non-empty array)"
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        c = m.get("content")
        if not isinstance(c, str) and not (
                isinstance(c, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in c)):
            return f"messages.{i}.content: Input should be a string or an array of content blocks"
    system = body.get("system")
    if system is not None and not isinstance(system, str) and not (
            isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in system)):
        return "system: Input should be a string or an array of text blocks"
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) and t.get("name") for t in tools)):
        return "tools: Input should be an array of tool definitions with a name"
    tc = body.get("tool_choice")
    if tc is not None:
        if not isinstance(tc, dict) or tc.get("type") not in ("auto", "any", "tool", "none"):
            return "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'"
        if tc["type"] == "tool" and tc.get("name") not in [t["name"] for t in tools or []]:
            return "tool_choice.name: must name one of the provided tools"
    th = body.get("thinking")
    if th is not None:
        if not isinstance(th, dict) or th.get("type") not in ("enabled", "disabled"):
            return "thinking.type: Input should be 'enabled' or 'disabled'"
        b = th.get("budget_tokens")
        if th["type"] == "enabled" and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            return "thinking.budget_tokens: Field required (positive integer)"
    return None


def _sample_value(schema, filler):
    t = (schema or {}).get("type")
    if t == "integer":
        return 42
    if t == "number":
        return 3.5
    if t == "boolean":
        return True
    if t == "array":
        return []
    if t == "object":
        return {}
    return filler


def tool_input(tool, n_chunks, h):
    """Deterministic input satisfying the schema's properties, long enough to split into n_chunks."""
    props = (tool.get("input_schema") or {}).get("properties") or {}
    words = " ".join(WORDS[(h + i) % len(WORDS)] for i in range(n_chunks))
    value = {k: _sample_value(s, words) for k, s in props.items()}
    text = json.dumps(value)
    if len(text) < n_chunks:  # no string field to carry text: pad with JSON whitespace
        text = "{" + " " * (n_chunks - len(text)) + text[1:]
    return value, text


def split_even(text, n):
    q, r = divmod(len(text), n)
    cuts, pos = [], 0
    for i in range(n):
        step = q + (1 if i < r else 0)
        cuts.append(text[pos:pos + step])
        pos += step
    return cuts


def plan(body):
    """Decide every block and every delta of the answer. Returns (blocks, stop_reason, n_tokens)."""
    text = prompt_text(body)
    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    natural = 20 + h % 40
    n = min(body["max_tokens"], natural)
    blocks = []  # (content_block_start payload, [delta payloads], final block)
    th = body.get("thinking") or {}
    n_think = min(th.get("budget_tokens", 0), 8, n) if th.get("type") == "enabled" else 0
    if n_think:
        pieces = [(" " if i else "") + THOUGHTS[(h + i) % len(THOUGHTS)] for i in range(n_think)]
        thought = "".join(pieces)
        sig = base64.b64encode(hashlib.sha256(thought.encode()).digest()).decode()
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces]
        deltas.append({"type": "signature_delta", "signature": sig})
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas,
                       {"type": "thinking", "thinking": thought, "signature": sig}))
    rest = n - n_think
    tc = body.get("tool_choice") or {}
    tools = body.get("tools") or []
    if tools and tc.get("type") in ("any", "tool") and rest > 0:
        tool = next(t for t in tools if t["name"] == tc.get("name")) if tc["type"] == "tool" else tools[0]
        value, js = tool_input(tool, rest, h)
        tid = "toolu_" + uuid.uuid4().hex[:24]
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in split_even(js, rest)]
        blocks.append(({"type": "tool_use", "id": tid, "name": tool["name"], "input": {}}, deltas,
                       {"type": "tool_use", "id": tid, "name": tool["name"], "input": value}))
        return blocks, "tool_use", n
    if rest > 0:
        pieces = [(" " if i else "") + WORDS[(h + 3 * i) % len(WORDS)] for i in range(rest)]
        blocks.append(({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces],
                       {"type": "text", "text": "".join(pieces)}))
    return blocks, ("max_tokens" if body["max_tokens"] < natural else "end_turn"), n


def error_response(status, etype, message):
    return web.json_response({"type": "error", "error": {"type": etype, "message": message}},
                             status=status, headers={"request-id": "req_" + uuid.uuid4().hex[:24]})


def sse(name, data):
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


async def messages(request):
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error_response(400, "invalid_request_error", "request body is not valid JSON")
    problem = validate(request, body)
    if problem:
        return error_response(400, "invalid_request_error", problem)
    cfg = request.app["cfg"]
    input_tokens = count_tokens(prompt_text(body))
    blocks, stop_reason, n_out = plan(body)
    msg = {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "content": [],
           "model": body["model"], "stop_reason": None, "stop_sequence": None,
           "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                     "cache_read_input_tokens": 0, "output_tokens": 1}}
    headers = {"request-id": "req_" + uuid.uuid4().hex[:24]}
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    def due(k):  # when the k-th output token (0-based) may be sent
        return t0 + (cfg.first_token_ms + k * cfg.token_ms) / 1000.0

    if not body.get("stream"):
        await asyncio.sleep(max(0.0, due(n_out - 1) - loop.time()))
        msg.update(content=[b[2] for b in blocks], stop_reason=stop_reason)
        msg["usage"]["output_tokens"] = n_out
        return web.json_response(msg, headers=headers)

    resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        await resp.write(sse("message_start", {"type": "message_start", "message": msg}))
        k = 0
        for index, (start, deltas, _final) in enumerate(blocks):
            await resp.write(sse("content_block_start",
                                 {"type": "content_block_start", "index": index, "content_block": start}))
            if index == 0:
                await resp.write(sse("ping", {"type": "ping"}))
            for delta in deltas:
                if delta["type"] != "signature_delta":  # signature is not an output token
                    await asyncio.sleep(max(0.0, due(k) - loop.time()))
                    k += 1
                await resp.write(sse("content_block_delta",
                                     {"type": "content_block_delta", "index": index, "delta": delta}))
            await resp.write(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        await resp.write(sse("message_delta", {"type": "message_delta",
                                               "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                               "usage": {"output_tokens": n_out}}))
        await resp.write(sse("message_stop", {"type": "message_stop"}))
        await resp.write_eof()
    except ConnectionResetError:
        pass  # client went away
    return resp


async def health(_request):
    return web.Response(text="ok")


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--first-token-ms", type=float, default=30)
    ap.add_argument("--token-ms", type=float, default=4)
    cfg = ap.parse_args()
    if cfg.host not in ("127.0.0.1", "localhost"):
        ap.error("this test server only listens on 127.0.0.1")
    app = web.Application(client_max_size=32 * 1024 * 1024)
    app["cfg"] = cfg
    app.router.add_post("/v1/messages", messages)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", cfg.port)
    await site.start()
    port = runner.addresses[0][1]
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
