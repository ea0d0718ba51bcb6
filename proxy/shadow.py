"""Shadowing: a sampled share of production's generating requests copied to a second
target, off the request path, its answers read in full, timed and recorded beside
production's, then thrown away.

Production is never harmed. A copy is made only once the production request has
gone upstream, from bytes the proxy already holds; it runs as a task of its own on
its own connection pool, and nothing on the production side waits for it, reads
from it or depends on how it ends. Copies beyond ``max_inflight``, or whose bodies
would take the bytes held past ``max_bytes``, are dropped and counted instead.

A copy carries the request as the client sent it, with ``--shadow-model-map`` and
``--shadow-header`` applied. The client's credentials stay behind unless
``forward_auth`` (a shadow is another deployment, with its own): ``--shadow-header
'Authorization: Bearer …'`` gives the shadow its own. A streaming chat or completion
request asks for usage (``stream_options.include_usage``) so that the shadow's
tokens are counted. Sampling is by trace id, so a session's requests (one trace)
are copied together or not at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from yarl import URL

from tailreplay.http_client import Origin, UpstreamError, UpstreamPool
from tailreplay.openai_api import ResponseTap
from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.openai import with_usage_requested
from tailreplay.sse import StreamTimeline
from tailreplay.tracecontext import new_span_id

__all__ = ["CREDENTIAL_HEADERS", "Shadow", "ShadowConfig", "ShadowCounts"]

log = logging.getLogger("tailreplay.proxy.shadow")

CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "api-key", "x-api-key", "cookie"}
)
"""The client's credentials: not sent to the shadow unless ``forward_auth``."""
_REPLACED = frozenset({"host", "traceparent", "tracestate", "content-length"})
"""Set per copy: the shadow's host (by the pool), the copy's own span, the body's length."""


@dataclass(frozen=True)
class ShadowConfig:
    url: URL
    """The shadow's base URL; a request's path is appended, as for the upstream."""
    share: float = 0.1
    """The share of generating requests copied, by trace id."""
    headers: tuple[tuple[str, str], ...] = ()
    """Sent with every copy, replacing a header of the same name."""
    model_map: tuple[tuple[str, str], ...] = ()
    """A copy of a request for model A asks the shadow for model B."""
    forward_auth: bool = False
    max_inflight: int = 64
    """Copies in flight at once; more are dropped."""
    max_bytes: int = 64 << 20
    """Request bytes held by copies in flight; a copy past it is dropped."""


@dataclass
class ShadowCounts:
    """What the shadow did: each copy is sent or dropped; a sent one may fail."""

    sent: int = 0
    dropped: int = 0
    errors: int = 0
    in_flight: int = 0


class Shadow:
    """Copies requests to the shadow target; each finished copy goes to ``record`` as
    an ``Exchange`` whose ``shadow_of`` is the production span it copied."""

    def __init__(
        self, config: ShadowConfig, record: Callable[[Exchange], None], timeout_s: float
    ) -> None:
        self.config = config
        self.record = record
        self.counts = ShadowCounts()
        self.pool = UpstreamPool(
            timeout_s=timeout_s,
            connect_timeout_s=min(timeout_s, 10.0),
            max_connections=config.max_inflight,
        )
        url = config.url
        assert url.host is not None and url.port is not None
        self.origin = Origin(url.scheme, url.host, url.port)
        self._base = str(url).rstrip("/")
        self._threshold = int(config.share * 2**64)
        self._models = dict(config.model_map)
        self._extra = [(name, value) for name, value in config.headers]
        self._drop = CREDENTIAL_HEADERS - {n.lower() for n, _ in config.headers}
        self._held = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def wants(self, trace_id: bytes) -> bool:
        """Whether requests of this trace are copied (the same test as the proxy's
        ``--sample``, on the trace id's first 8 bytes, which are random)."""
        return self._threshold >= 2**64 or int.from_bytes(trace_id[:8], "big") < self._threshold

    def copy(self, ex: Exchange, body: bytes, headers: list[tuple[str, str]]) -> None:
        """Send a copy of ``ex`` (its body as the client sent it, and the headers the
        upstream got) unless the bounds are reached; returns at once."""
        c, config = self.counts, self.config
        if c.in_flight >= config.max_inflight or self._held + len(body) > config.max_bytes:
            c.dropped += 1
            return
        c.in_flight += 1
        self._held += len(body)
        task = asyncio.ensure_future(self._send(ex, body, headers))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self, timeout_s: float) -> None:
        """Let copies in flight finish for up to ``timeout_s``, then cancel the rest."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        await self.pool.close()

    async def _send(self, original: Exchange, body: bytes, headers: list[tuple[str, str]]) -> None:
        ex = Exchange(
            trace_id=original.trace_id,
            span_id=new_span_id(),
            parent_span_id=original.span_id,
            start_ns=time.time_ns(),
            t0_ns=time.monotonic_ns(),
            method=original.method,
            path=original.path,
            route=original.route,
            headers=original.headers,
            shadow_of=original.span_id,
        )
        try:
            ex.req_body = self._body(original.path, body)
            ex.bytes_in = len(ex.req_body)
            await self._exchange(ex, self._headers(headers, ex))
        except UpstreamError as exc:
            ex.error, ex.status = exc.kind, exc.status
        except asyncio.CancelledError:
            ex.error = ex.error or "cancelled"  # the proxy stopped before the copy ended
        except Exception:  # a bug here must never reach production's side
            log.exception("shadow copy failed")
            ex.error = ex.error or "shadow_internal"
        finally:
            self._held -= len(body)
            self.counts.in_flight -= 1
            self.counts.sent += 1
            ex.finish(time.monotonic_ns())
            if ex.error is not None or ex.status >= 400 or ex.status == 0:
                self.counts.errors += 1
            self.record(ex)

    def _body(self, path: str, body: bytes) -> bytes:
        """The copy's body: the model mapped, usage asked for on a stream."""
        if self._models and b'"model"' in body:
            body = _mapped(body, self._models)
        return with_usage_requested(path, body) or body

    def _headers(self, upstream: list[tuple[str, str]], ex: Exchange) -> list[tuple[str, str]]:
        """The upstream's headers without credentials (unless forwarded), the copy's
        span, and ``--shadow-header`` last (the pool writes the shadow's Host)."""
        drop = _REPLACED | ({n.lower() for n, _ in self._extra})
        if not self.config.forward_auth:
            drop |= self._drop
        out = [(n, v) for n, v in upstream if n.lower() not in drop]
        out.append(("traceparent", f"00-{ex.trace_id.hex()}-{ex.span_id.hex()}-01"))
        out += self._extra
        return out

    async def _exchange(self, ex: Exchange, headers: list[tuple[str, str]]) -> None:
        """Send the copy and read its answer whole: timeline, tap and byte count, as the
        proxy reads production's."""
        target = self._base + ex.path
        raw_target = URL(target, encoded=True).raw_path_qs
        assert ex.req_body is not None
        response = await self.pool.send(self.origin, ex.method, raw_target, headers, ex.req_body)
        try:
            ex.status = response.status
            sse = False
            for name, value in response.headers:
                lower = name.lower()
                if lower == "content-type":
                    sse = value.startswith("text/event-stream")
                elif lower == "content-encoding":
                    ex.content_encoding = value
            ex.tap = ResponseTap(stream=sse)
            ex.timeline = StreamTimeline() if sse else None
            response.start(_Reader(ex))
            while not await response.wait():
                response.resume()  # never paused by the reader; resumed should it be
            ex.duration_ns = time.monotonic_ns() - ex.t0_ns
        finally:
            response.close()


class _Reader:
    """Takes the shadow's answer as it is read: times it, taps it, keeps nothing more."""

    __slots__ = ("ex",)

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex

    def __call__(self, chunk: bytes) -> bool:
        ex = self.ex
        if chunk:
            now = time.monotonic_ns()
            if ex.timeline is not None:
                ex.timeline.feed(chunk, now)
            elif ex.ttfb_ns is None:
                ex.ttfb_ns = now - ex.t0_ns
            assert ex.tap is not None
            ex.tap.feed(chunk)
            ex.bytes_out += len(chunk)
        return True


def _mapped(body: bytes, models: dict[str, str]) -> bytes:
    """``body`` with its ``model`` renamed when the map names it; unchanged otherwise."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return body
    if not isinstance(doc, dict) or doc.get("model") not in models:
        return body
    doc["model"] = models[doc["model"]]
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
