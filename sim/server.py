"""The simulator's HTTP face: every dialect's routes over the batching engine.

Each route of ``tailreplay.dialects`` is served: the dialect reads the request and
writes the answer (whole, or the exact event sequence of its stream); the engine
decides when each token comes. Embeddings are a prefill and one step, no tokens.

``build_app`` makes the aiohttp application; ``serve`` runs it in-process (for
fast tests); ``run`` is what ``tailreplay sim`` calls. ``tailreplay.sim.launcher``
starts it in a child process instead, so it never shares a replayer's loop.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
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

from tailreplay.dialects import DIALECTS, Dialect
from tailreplay.dialects.base import ReplyWriter, SimAnswer
from tailreplay.sim.batching import Engine, NeverFits, QueueFull, Sequence
from tailreplay.sim.faults import Faults
from tailreplay.sim.metrics import SimMetrics
from tailreplay.sim.output import plan_output, plan_reasoning, words
from tailreplay.sim.prefix_cache import block_hashes
from tailreplay.sim.profiles import PROFILES, EngineProfile
from tailreplay.sim.schema import BadRequest, SimRequest, parse_request
from tailreplay.sim.settings import SimArgs
from tailreplay.traces.text.prompt_stats import prompt_stats
from tailreplay.traces.text.tokens import get as get_encoder
from tailreplay.units import host_port

__all__ = ["SimConfig", "build_app", "run", "serve"]

MAX_REQUEST_BYTES = 32 << 20
_CHARS_PER_TOKEN_MAX = 128  # the longest cl100k/o200k token is 128 bytes
_INLINE_TOKENIZE_CHARS = 20_000  # longer prompts are tokenised off the event loop


_DEFAULT = SimArgs()
"""``tailreplay sim``'s defaults, which the config's are."""


@dataclass
class SimConfig:
    profile: EngineProfile = field(default_factory=lambda: PROFILES[_DEFAULT.profile_name])
    """As `tailreplay sim` runs unless told (`--profile`)."""
    seed: int = _DEFAULT.seed
    host: str = _DEFAULT.listen[0]
    port: int = _DEFAULT.listen[1]
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
    for dialect in DIALECTS:
        for route in dialect.routes:
            app.router.add_post(route, functools.partial(_complete, dialect=dialect))
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


def _error(
    dialect: Dialect, status: int, message: str, param: str | None = None, **headers: str
) -> web.Response:
    kind = {400: "invalid_request_error", 429: "rate_limit_error"}.get(status, "server_error")
    body = dialect.error_body(message, kind, param)
    return web.json_response(body, status=status, headers=headers)


async def _complete(request: web.Request, dialect: Dialect) -> web.StreamResponse:
    state = request.app[STATE]
    arrival = time.monotonic()
    metrics = state.metrics
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        req = parse_request(await request.read(), dialect, headers)
    except BadRequest as exc:
        metrics.rejected.labels("bad_request").inc()
        return _error(dialect, 400, str(exc), exc.param)
    except web.HTTPRequestEntityTooLarge:
        metrics.rejected.labels("bad_request").inc()
        return _error(dialect, 413, f"request body over {MAX_REQUEST_BYTES} bytes")

    config = state.config
    limit = config.profile.max_model_len
    if len(req.prompt) > _CHARS_PER_TOKEN_MAX * limit:
        # Far too long whatever the tokenizer says: refuse without tokenising megabytes.
        metrics.rejected.labels("never_fits").inc()
        return _error(
            dialect,
            400,
            f"This model's maximum context length is {limit} tokens; the prompt is far longer.",
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
        return _error(dialect, 500, "injected fault (--fault-error-rate)")
    try:
        state.engine.check_fits(prompt_tokens, req.max_tokens)
        if fault.stall_s:
            await asyncio.sleep(fault.stall_s)
        acceptance = config.profile.spec_acceptance(bits) if spec else 0.0
        seq = state.engine.submit(prompt_tokens, target, blocks, acceptance)
    except NeverFits as exc:
        metrics.rejected.labels("never_fits").inc()
        return _error(dialect, 400, str(exc), "messages" if dialect.chat_prompt else "prompt")
    except QueueFull as exc:
        metrics.rejected.labels("queue_full").inc()
        return _error(dialect, 429, str(exc), **{"Retry-After": "1"})

    reasoning = plan_reasoning(req, target, config.profile, config.seed)
    if req.ask.tool is not None and finish_reason == "stop":
        finish_reason = "tool_calls"
    answer = SimAnswer(
        ask=req.ask,
        id=uuid.uuid4().hex,
        created=int(time.time()),
        prompt_tokens=prompt_tokens,
        cached_tokens=None,
        finish=finish_reason,
        reasoning=reasoning,
        output_tokens=target,
    )
    try:
        if req.stream:
            writer = dialect.writer(answer)
            return await _stream(request, state, req, seq, writer, fault.reset_after, arrival)
        return await _whole(state, req, seq, dialect, answer, arrival)
    finally:
        if not seq.finished:
            metrics.aborted.inc()
        state.engine.cancel(seq)  # no-op when it finished; frees slot and KV otherwise


async def _whole(
    state: _State,
    req: SimRequest,
    seq: Sequence,
    dialect: Dialect,
    answer: SimAnswer,
    arrival: float,
) -> web.Response:
    first_at = None
    while await seq.next_tokens():
        first_at = first_at or time.monotonic()
    # An embedding generates nothing: its one engine step is the prefill's end.
    made = seq.generated if dialect.generates else 0
    tokens = list(itertools.islice(words(req, state.config.seed), made))
    answer.cached_tokens = seq.cached_tokens
    _observe(state, seq, answer.finish, arrival, first_at)
    return web.json_response(dialect.writer(answer).whole(tokens))


async def _stream(
    request: web.Request,
    state: _State,
    req: SimRequest,
    seq: Sequence,
    writer: ReplyWriter,
    reset_after: int | None,
    arrival: float,
) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    head = writer.head()  # the events before any token (Anthropic's message_start)
    if head:
        await resp.write(head)
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
            if sent == 0:  # known once the prefill ran
                writer.answer.cached_tokens = seq.cached_tokens
            out.append(writer.token(next(text), sent))
            sent += 1
        await resp.write(b"".join(out))
    await resp.write(writer.tail(sent))
    _observe(state, seq, writer.answer.finish, arrival, first_at)
    await resp.write_eof()
    return resp


def _observe(
    state: _State, seq: Sequence, finish: str, arrival: float, first_at: float | None
) -> None:
    m = state.metrics
    now = time.monotonic()
    m.e2e.observe(now - arrival)
    if first_at is not None:
        m.ttft.observe(first_at - arrival)
        if seq.generated > 1:
            m.tpot.observe((now - first_at) / (seq.generated - 1))
    m.success.labels(m.model, finish).inc()


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
