"""Sending one request and measuring it: the dispatcher's only contact with the network.

A small interface (``Transport.send``) so the dispatcher's timing logic can be
tested with a fake, while integration tests and real replays use ``HttpTransport``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from tailreplay.openai_api import ResponseTap, parse_usage, response_problem
from tailreplay.replayer.request import RequestSpec
from tailreplay.retry_after import retry_after_s
from tailreplay.sse import StreamTimeline

__all__ = ["HttpTransport", "Outcome", "Transport"]


@dataclass(slots=True)
class Outcome:
    """What came back for one request, measured the way the proxy measures a capture."""

    status: int = 0
    error: str | None = None
    ttfb_ns: int | None = None
    """First body byte; for SSE the first token event (tailreplay.sse)."""
    ttft_content_ns: int | None = None
    """SSE: the first answer token, when reasoning came before it."""
    duration_ns: int | None = None
    gaps_us: list[int] | None = None
    bytes_out: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    tokens_source: str | None = None
    """``usage`` (the target said), ``estimate`` (counted here), or None."""
    finish_reason: str | None = None
    error_text: str = ""
    content_type: str = ""
    retry_after_s: float | None = None
    """A 429's or 503's ``Retry-After``, in seconds."""


class Transport(Protocol):
    async def send(self, spec: RequestSpec, headers: dict[str, str]) -> Outcome: ...

    def url(self, path: str) -> str:
        """Where a recorded path is sent (for messages)."""
        ...

    async def warm(self, connections: int) -> None:
        """Open up to ``connections`` connections before the first request is due."""
        ...

    async def close(self) -> None: ...


WARM_S = 5.0
"""The longest the warm-up may take."""


class _Clock:
    """When a request's head was written: its times count from there."""

    __slots__ = ("t0_ns",)

    def __init__(self, t0_ns: int) -> None:
        self.t0_ns = t0_ns


async def _headers_sent(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, _Clock):  # a replayed request, not a warm-up
        ctx.trace_request_ctx.t0_ns = time.monotonic_ns()


class HttpTransport:
    """aiohttp's client, one connector sized by --connections.

    A request's times count from when its head was written to the socket, as the
    proxy's count from when a request's head arrived: so a capture and its replay
    measure the same span of the exchange (from the call itself they read
    1-4 ms longer: building and writing the request, behind the loop's other work).
    """

    def __init__(self, base_url: str, *, connections: int, timeout_s: float) -> None:
        self.base = base_url.rstrip("/")
        # A base given with /v1 (as OpenAI SDKs take it) is not doubled: /v1/x goes to
        # <host>/v1/x, not <host>/v1/v1/x.
        self._v1_base = self.base[: -len("/v1")] if self.base.endswith("/v1") else None
        trace = aiohttp.TraceConfig()
        trace.on_request_headers_sent.append(_headers_sent)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections),
            timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, 10)),
            read_bufsize=1 << 20,
            auto_decompress=True,
            trace_configs=[trace],
        )

    async def send(self, spec: RequestSpec, headers: dict[str, str]) -> Outcome:
        if spec.abort_after_s is None:
            return await self._send(spec, headers)
        # A recorded abort whose tokens are unknown: leave after the recorded time.
        began = time.monotonic_ns()
        try:
            async with asyncio.timeout(spec.abort_after_s):
                return await self._send(spec, headers)
        except TimeoutError:
            return Outcome(error="client_abort", duration_ns=time.monotonic_ns() - began)

    async def _send(self, spec: RequestSpec, headers: dict[str, str]) -> Outcome:
        out = Outcome()
        aborted = False
        clock = _Clock(time.monotonic_ns())  # until the head is written: the call's start
        try:
            async with self._session.request(
                spec.method, self.url(spec.path), data=spec.body, headers=headers,
                trace_request_ctx=clock,
            ) as resp:  # fmt: skip
                t0 = clock.t0_ns
                out.status = resp.status
                out.content_type = resp.content_type
                if resp.status in (429, 503):
                    out.retry_after_s = retry_after_s(resp.headers.get("Retry-After"))
                sse = resp.content_type == "text/event-stream"
                timeline = StreamTimeline() if sse else None
                tap = ResponseTap(stream=sse)
                stop_at = spec.abort_after_tokens or float("inf")
                async for chunk in resp.content.iter_any():
                    now = time.monotonic_ns()
                    if timeline is not None:
                        timeline.feed(chunk, now)
                    elif out.ttfb_ns is None:
                        out.ttfb_ns = now - t0
                    out.bytes_out += len(chunk)
                    tap.feed(chunk)
                    if timeline is not None and timeline.tokens >= stop_at:
                        aborted = True  # the recorded client left here: so do we
                        resp.close()
                        break
                end = time.monotonic_ns()
                out.duration_ns = end - t0
                if timeline is not None:
                    timeline.finish(end)
                    _timeline(out, timeline, t0)
                _read_body(out, spec, tap, timeline)
                if aborted:
                    out.error = "client_abort"
        except TimeoutError:
            out.error = "timeout"
        except aiohttp.ClientConnectorError:
            out.error = "connect"
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError):
            out.error = "reset"
        except aiohttp.ClientError as exc:
            out.error = type(exc).__name__
        if out.duration_ns is None:
            out.duration_ns = time.monotonic_ns() - clock.t0_ns
        return out

    def url(self, path: str) -> str:
        """Where a recorded path is sent."""
        if self._v1_base is not None and (path.startswith("/v1/") or path == "/v1"):
            return self._v1_base + path
        return self.base + path

    async def warm(self, connections: int) -> None:
        """Open ``connections`` keep-alive connections with ``GET /v1/models`` (any answer
        will do), so the first burst of due requests does not each pay for a connect:
        without it, the first 16 of a burst left up to 12 ms late."""

        async def one() -> None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self._session.get(self.url("/v1/models")) as resp:
                    await resp.read()

        # Bounded: a target that hangs on it is found by the replay itself.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(one() for _ in range(connections))), WARM_S)

    async def close(self) -> None:
        await self._session.close()


def _timeline(out: Outcome, timeline: StreamTimeline, t0_ns: int) -> None:
    """A stream's TTFT, time to the answer and inter-token gaps."""
    first, answer = timeline.first_ns, timeline.first_answer_ns
    out.ttfb_ns = first - t0_ns if first is not None else None
    if answer is not None and answer != first:
        out.ttft_content_ns = answer - t0_ns
    out.gaps_us = timeline.gaps_us


def _read_body(
    out: Outcome, spec: RequestSpec, tap: ResponseTap, timeline: StreamTimeline | None
) -> None:
    """Error text, or usage and finish reason; tokens counted here when the target gave none."""
    if out.status >= 400:
        out.error_text = bytes(tap.kept[:2000]).decode("utf-8", "replace")
        return
    out.error = response_problem(spec.path, out.status, tap, timeline)
    usage = parse_usage(bytes(tap.kept))
    out.finish_reason = usage.finish_reason
    if usage.prompt_tokens is not None and usage.completion_tokens is not None:
        out.prompt_tokens, out.completion_tokens = usage.prompt_tokens, usage.completion_tokens
        out.cached_tokens, out.reasoning_tokens = usage.cached_tokens, usage.reasoning_tokens
        out.tokens_source = "usage"
    elif out.error is None and timeline is not None and timeline.tokens:
        # No usage (llama.cpp ignores include_usage): one token an event, as the proxy counts.
        out.completion_tokens = timeline.tokens
        out.reasoning_tokens = timeline.reasoning or None
        out.tokens_source = "estimate"
