"""The simulator's HTTP face: OpenAI-compatible routes over the batching engine.

``build_app`` makes the aiohttp application; ``serve`` runs it in-process (for
fast tests); ``run`` is what ``tailreplay sim`` calls. ``tailreplay.sim.launcher``
starts it in a child process instead, so it never shares a replayer's loop.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tailreplay.sim.batching import Engine, NeverFits, QueueFull, Sequence
from tailreplay.sim.faults import Faults
from tailreplay.sim.metrics import SimMetrics
from tailreplay.sim.output import plan_output, plan_reasoning, words
from tailreplay.sim.prefix_cache import block_hashes
from tailreplay.sim.profiles import PROFILES, EngineProfile
from tailreplay.sim.schema import BadRequest, SimRequest, error_body, parse_request
from tailreplay.traces.text.prompt_stats import prompt_stats
from tailreplay.traces.text.tokens import get as get_encoder
from tailreplay.units import host_port

__all__ = ["SimConfig", "build_app", "run", "serve"]

MAX_REQUEST_BYTES = 32 << 20
_CHARS_PER_TOKEN_MAX = 128  # the longest cl100k/o200k token is 128 bytes
_INLINE_TOKENIZE_CHARS = 20_000  # longer prompts are tokenised off the event loop


@dataclass
class SimConfig:
    profile: EngineProfile = field(default_factory=lambda: PROFILES["default"])
    seed: int = 0
    host: str = "127.0.0.1"
    port: int = 8000
    faults: Faults = field(default_factory=Faults)
    parent_pid: int | None = None
    """Stop when this process is no longer the parent (it died without stopping us)."""


@dataclass
class _State:
    config: SimConfig
    engine: Engine
    metrics: SimMetrics


STATE = web.AppKey("state", _State)


def build_app(config: SimConfig) -> web.Application:
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.cleanup_ctx.append(_engine_ctx(config))
    return app


def _engine_ctx(config: SimConfig) -> Any:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        # Build the tokenizer now (~0.2 s), not inside the first request's latency.
        await asyncio.get_running_loop().run_in_executor(None, get_encoder)
        engine = Engine(config.profile)
        engine.start()
        app[STATE] = _State(config, engine, SimMetrics(engine, config.profile.served_model))
        yield
        await engine.stop()

    return ctx


def _tokenize(prompt: str, block_size: int, entropy: bool = False) -> tuple[int, list[int], float]:
    """The prompt's cl100k_base token count, the chained hashes of its full
    ``block_size``-token blocks (none when ``block_size`` is 0: no prefix cache), and
    (when asked: speculative decoding) its token entropy in bits."""
    tokens = get_encoder().encode_ordinary(prompt)
    stats = prompt_stats(tokens) if entropy else None
    bits = stats[0] / 1000 if stats is not None else 0.0
    return len(tokens), block_hashes(tokens, block_size) if block_size else [], bits


def _error(status: int, message: str, param: str | None = None, **headers: str) -> web.Response:
    kind = {400: "invalid_request_error", 429: "rate_limit_error"}.get(status, "server_error")
    return web.json_response(error_body(message, param, kind), status=status, headers=headers)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _complete(request, "chat")


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, "completion")


async def _complete(request: web.Request, kind: str) -> web.StreamResponse:
    state = request.app[STATE]
    arrival = time.monotonic()
    metrics = state.metrics
    try:
        req = parse_request(await request.read(), kind)
    except BadRequest as exc:
        metrics.rejected.labels("bad_request").inc()
        return _error(400, str(exc), exc.param)
    except web.HTTPRequestEntityTooLarge:
        metrics.rejected.labels("bad_request").inc()
        return _error(413, f"request body over {MAX_REQUEST_BYTES} bytes")

    config = state.config
    limit = config.profile.max_model_len
    if len(req.prompt) > _CHARS_PER_TOKEN_MAX * limit:
        # Far too long whatever the tokenizer says: refuse without tokenising megabytes.
        metrics.rejected.labels("never_fits").inc()
        return _error(
            400, f"This model's maximum context length is {limit} tokens; the prompt is far longer."
        )
    block_size = config.profile.block_size if config.profile.prefix_caching else 0
    spec = config.profile.spec_tokens > 0
    if len(req.prompt) > _INLINE_TOKENIZE_CHARS:
        prompt_tokens, blocks, bits = await asyncio.get_running_loop().run_in_executor(
            None, _tokenize, req.prompt, block_size, spec
        )
    else:
        prompt_tokens, blocks, bits = _tokenize(req.prompt, block_size, spec)
    target, finish_reason = plan_output(req, prompt_tokens, config.profile, config.seed)
    fault = config.faults.draw(target)
    if fault.error:
        metrics.rejected.labels("fault_error").inc()
        return _error(500, "injected fault (--fault-error-rate)")
    try:
        state.engine.check_fits(prompt_tokens, req.max_tokens)
        if fault.stall_s:
            await asyncio.sleep(fault.stall_s)
        acceptance = config.profile.spec_acceptance(bits) if spec else 0.0
        seq = state.engine.submit(prompt_tokens, target, blocks, acceptance)
    except NeverFits as exc:
        metrics.rejected.labels("never_fits").inc()
        return _error(400, str(exc), "messages" if kind == "chat" else "prompt")
    except QueueFull as exc:
        metrics.rejected.labels("queue_full").inc()
        return _error(429, str(exc), **{"Retry-After": "1"})

    reasoning = plan_reasoning(req, target, config.profile, config.seed)
    reply = _Reply(req, prompt_tokens, finish_reason, reasoning, seq)
    try:
        if req.stream:
            return await _stream(request, state, req, seq, reply, fault.reset_after, arrival)
        return await _whole(state, req, seq, reply, arrival)
    finally:
        if not seq.finished:
            metrics.aborted.inc()
        state.engine.cancel(seq)  # no-op when it finished; frees slot and KV otherwise


class _Reply:
    """Builds the OpenAI-shaped bodies for one request."""

    def __init__(
        self, req: SimRequest, prompt_tokens: int, finish: str, reasoning: int, seq: Sequence
    ) -> None:
        self.req = req
        self.seq = seq
        self.prompt_tokens = prompt_tokens
        self.finish = finish
        self.reasoning = reasoning
        """The first this many output tokens are thinking (``reasoning_content``)."""
        self.chat = req.kind == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = req.model or ""
        self.object = "chat.completion" if self.chat else "text_completion"

    def usage(self, completion_tokens: int) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        }
        if self.seq.cached_tokens is not None:  # as vLLM and OpenAI report prefix-cache hits
            usage["prompt_tokens_details"] = {"cached_tokens": self.seq.cached_tokens}
        if self.reasoning:  # as OpenAI and vLLM report a reasoning model's thinking
            thought = min(self.reasoning, completion_tokens)
            usage["completion_tokens_details"] = {"reasoning_tokens": thought}
        return usage

    def whole(self, tokens: list[str], completion_tokens: int) -> dict[str, Any]:
        if self.chat:
            thought, answer = tokens[: self.reasoning], tokens[self.reasoning :]
            message = {"role": "assistant", "content": "".join(answer)}
            if thought:
                message["reasoning_content"] = "".join(thought)
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "finish_reason": self.finish,
                "logprobs": None,
            }
        else:
            text = "".join(tokens)
            choice = {"index": 0, "text": text, "finish_reason": self.finish, "logprobs": None}
        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(completion_tokens),
        }

    def chunk(self, text: str | None, index: int, finish: str | None = None) -> bytes:
        """The SSE event of output token ``index`` (-1: the closing event)."""
        if self.chat:
            delta: dict[str, Any] = {}
            if index == 0:
                delta["role"] = "assistant"
            if text is not None:
                delta["reasoning_content" if index < self.reasoning else "content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        body: dict[str, Any] = {
            "id": self.id,
            "object": self.object + ("" if not self.chat else ".chunk"),
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }
        if self.req.include_usage:
            body["usage"] = None
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"

    def usage_chunk(self, completion_tokens: int) -> bytes:
        body = {
            "id": self.id,
            "object": self.object + (".chunk" if self.chat else ""),
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": self.usage(completion_tokens),
        }
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


async def _whole(
    state: _State, req: SimRequest, seq: Sequence, reply: _Reply, arrival: float
) -> web.Response:
    first_at = None
    while await seq.next_tokens():
        first_at = first_at or time.monotonic()
    tokens = list(itertools.islice(words(req, state.config.seed), seq.generated))
    _observe(state, seq, reply, arrival, first_at)
    return web.json_response(reply.whole(tokens, seq.generated))


async def _stream(
    request: web.Request,
    state: _State,
    req: SimRequest,
    seq: Sequence,
    reply: _Reply,
    reset_after: int | None,
    arrival: float,
) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    text = words(req, state.config.seed)
    sent = 0
    first_at = None
    while n := await seq.next_tokens():
        first_at = first_at or time.monotonic()
        out = []
        for _ in range(n):
            if reset_after is not None and sent >= reset_after:
                state.metrics.rejected.labels("fault_reset").inc()
                if request.transport is not None:
                    request.transport.abort()  # an RST, as a crashed server gives
                state.engine.cancel(seq)
                return resp
            out.append(reply.chunk(next(text), sent))
            sent += 1
        await resp.write(b"".join(out))
    tail = [reply.chunk(None, -1, finish=reply.finish)]
    if req.include_usage:
        tail.append(reply.usage_chunk(sent))
    tail.append(b"data: [DONE]\n\n")
    await resp.write(b"".join(tail))
    _observe(state, seq, reply, arrival, first_at)
    await resp.write_eof()
    return resp


def _observe(
    state: _State, seq: Sequence, reply: _Reply, arrival: float, first_at: float | None
) -> None:
    m = state.metrics
    now = time.monotonic()
    m.e2e.observe(now - arrival)
    if first_at is not None:
        m.ttft.observe(first_at - arrival)
        if seq.generated > 1:
            m.tpot.observe((now - first_at) / (seq.generated - 1))
    m.success.labels(m.model, reply.finish).inc()


async def _models(request: web.Request) -> web.Response:
    model = request.app[STATE].config.profile.served_model
    return web.json_response(
        {
            "object": "list",
            "data": [{"id": model, "object": "model", "created": 0, "owned_by": "tailreplay"}],
        }
    )


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[STATE].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


@asynccontextmanager
async def serve(config: SimConfig) -> AsyncIterator[str]:
    """Run the simulator on this loop; yields its base URL (port 0 picks a free port).

    >>> async with serve(SimConfig(port=0)) as url: ...
    """
    runner = web.AppRunner(build_app(config), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host_port(host, port)}"
    finally:
        await runner.cleanup()


async def run(config: SimConfig, ready: Any = None) -> None:
    """Serve until SIGINT or SIGTERM; ``ready(url)`` is called once listening."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with serve(config) as url:
        if ready is not None:
            ready(url)
        if config.parent_pid is None:
            await stop.wait()
        else:
            watch = asyncio.create_task(_watch_parent(config.parent_pid, stop))
            await stop.wait()
            watch.cancel()


async def _watch_parent(pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` once ``pid`` is no longer our parent: a launcher killed outright
    (SIGKILL, or SIGTERM to a process that does not clean up) must not leave its
    simulator running, holding a port and a core."""
    while os.getppid() == pid:
        await asyncio.sleep(0.5)
    stop.set()
