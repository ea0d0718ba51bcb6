"""Shadowing: a sampled share of production's generating requests copied to a second
target, off the request path, its answers read in full, timed and recorded beside
production's, then thrown away.

Production is never harmed. A copy is made only once the production request has
gone upstream, from bytes the proxy already holds; it runs as a task of its own on
its own connection pool, and nothing on the production side waits for it, reads
from it or depends on how it ends. Copies beyond ``max_inflight``, or whose bodies
would take the bytes held past ``max_bytes``, are dropped and counted instead.

A copy carries the request as the client sent it, with ``--shadow-model-map`` and
``--shadow-header`` applied (a body sent with a ``Content-Encoding`` goes as it is:
its model is not mapped, nor usage asked for). The client's credentials stay behind
unless ``forward_auth`` (a shadow is another deployment, with its own): every header and
query parameter whose name the recorder's rule calls a credential
(``traces/text/secret_names.py``: ``Authorization``, ``X-Goog-Api-Key``,
``?api-key=``, ...), ``Cookie``, and the OpenAI account headers; ``--shadow-header
'Authorization: Bearer …'`` gives the shadow its own.

The shadow's answers cost the proxy CPU as production's do, on the same thread, so
whatever the shadow sends is bounded per copy: at most ``MAX_INFORMATIONAL`` 1xx
heads, a head within ``MAX_HEAD_BYTES`` and ``MAX_HEADER_LINES``
(``tailreplay/http/connection.py``), an answer of at most ``MAX_ANSWER_BYTES`` and
``max_time_s``. A copy past a bound is cut (its connection dropped) and counted in
``ShadowCounts.cut``; ``DOWN_AFTER`` copies in a row cut, refused a connection or
reset, and the shadow is taken for down: copies are dropped without a try for a
while, so a shadow that attacks with every answer costs a handful of copies per
back-off, not one per request. All copies' answers together are read at most ``read_rate`` bytes a
second, each read at most ``RECV_BUFFER`` bytes (the socket's receive buffer: one
callback never holds the loop for long, and TCP holds the shadow back). A shadow
that streams faster is paused (its connection stops being read) and the copies so
slowed are recorded as ``shadow_throttled``: their timing is the proxy's pace, not
the shadow's.

A streaming chat or completion request asks for usage
(``stream_options.include_usage``) so that the shadow's tokens are counted.
Sampling is by trace id, so a session's requests (one trace) are copied together
or not at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from yarl import URL

from tailreplay.declared import default_of
from tailreplay.http.client import Origin, UpstreamError, UpstreamPool
from tailreplay.http.connection import MALFORMED
from tailreplay.openai_api import response_problem
from tailreplay.proxy.content_coding import encoded
from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.openai import with_usage_requested
from tailreplay.proxy.settings import ShadowOptions
from tailreplay.sampling import in_share, sample_point, share_threshold
from tailreplay.tracecontext import new_span_id
from tailreplay.traces.text.redact_targets import redact_url
from tailreplay.traces.text.secret_names import is_secret_name

__all__ = ["ACCOUNT_HEADERS", "MAX_ANSWER_BYTES", "Shadow", "ShadowConfig", "ShadowCounts"]

log = logging.getLogger("tailreplay.proxy.shadow")

ACCOUNT_HEADERS = frozenset({"openai-organization", "openai-project"})
"""Not secrets, but the client's account at its provider: not the shadow's business."""
DOWN_AFTER = 5
"""Copies in a row refused a connection, reset or cut at a bound, after which the
shadow is taken for down: copies are dropped (counted) without a try for ``DOWN_S``
seconds, doubled while it stays down."""
DOWN_S = (1.0, 30.0)
MAX_ANSWER_BYTES = 16 << 20
"""A copy's answer is cut past this (error ``shadow_too_large``): an LLM's longest
answers are a few MB; an endless stream would cost the proxy without end."""
RECV_BUFFER = 16 * 1024
"""The receive buffer of a connection to the shadow: a read hands the parser at most
about twice this (Linux doubles it), where with the system's default asyncio reads
up to 256 KiB at once, all parsed and fed to the timeline in one callback."""
CUT_KINDS = frozenset({"bad_response", "upstream_timeout"})
"""Errors of the shared client that are a bound reached: a head too large or too many
1xx heads, and a copy past its time (``ShadowConfig.max_time_s``)."""
TOO_LARGE = "shadow_too_large"
_REPLACED = frozenset({"host", "traceparent", "tracestate", "content-length"})
"""Set per copy: the shadow's host (by the pool), the copy's own span, the body's length."""


@dataclass(frozen=True)
class ShadowConfig:
    url: URL
    """The shadow's base URL; a request's path is appended, as for the upstream."""
    share: float = default_of(ShadowOptions, "shadow_share")
    """The share of generating requests copied, by trace id."""
    headers: tuple[tuple[str, str], ...] = ()
    """Sent with every copy, replacing a header of the same name."""
    model_map: tuple[tuple[str, str], ...] = ()
    """A copy of a request for model A asks the shadow for model B."""
    forward_auth: bool = False
    max_inflight: int = default_of(ShadowOptions, "shadow_max_inflight")
    """Copies in flight at once; more are dropped."""
    max_bytes: int = 64 << 20
    """Request bytes held by copies in flight; a copy past it is dropped."""
    max_time_s: float = default_of(ShadowOptions, "shadow_max_time")
    """A copy's whole exchange (connect, send, answer); past it the copy is cut. Under
    the proxy's ``--timeout`` when that is shorter."""
    read_rate: int = 1 << 20
    """Bytes a second of the copies' answers read, all together; past it the shadow's
    connections are paused. Reading a streamed answer costs the proxy about 6% of a
    core per MiB a second (an endless shadow stream, docs/shadow.md); 1 MiB/s is 7,000
    tokens a second of SSE, 10% of a deployment streaming 70,000."""
    secret_names: frozenset[str] = frozenset()
    """More header names holding credentials (the proxy's ``--redact-header``)."""


@dataclass
class ShadowCounts:
    """What the shadow did: each copy is sent or dropped; a sent one may fail."""

    sent: int = 0
    """Copies sent (in flight or ended)."""
    dropped: int = 0
    errors: int = 0
    """Of those ended, the ones the shadow failed (``copy_failed``)."""
    unfinished: int = 0
    """Of those ended, the ones the proxy cut when it stopped (``UNFINISHED``)."""
    in_flight: int = 0
    throttled: int = 0
    """Copies whose answer was read slower than it came (``ShadowConfig.read_rate``)."""
    cut: int = 0
    """Copies cut at a bound: more than ``MAX_INFORMATIONAL`` 1xx heads, a head past its
    bounds, an answer past ``MAX_ANSWER_BYTES`` or ``ShadowConfig.max_time_s``."""


UNFINISHED = "cancelled"
"""A copy the proxy cut when it stopped, the shadow still answering or silent."""
THROTTLED = "shadow_throttled"


def copy_failed(ex: Exchange) -> bool:
    """Whether the shadow failed the copy: no answer, a status of 400 or more, or an
    answer the API does not promise. A copy the proxy cut when it stopped
    (``UNFINISHED``) or read slower than it came (``THROTTLED``) is neither a failure
    nor a success of the shadow; both are counted apart, in every view."""
    if ex.status >= 400:
        return True
    if ex.error in (UNFINISHED, THROTTLED):
        return False
    return ex.error is not None or ex.status == 0


JUDGED_BYTES = 64 * 1024
"""The largest non-streamed answer the proxy parses for the verdict on its own
thread (about 0.3 ms of JSON); a larger one is judged by the recorder alone."""


def _judged_here(ex: Exchange) -> bool:
    """Whether the proxy reads the copy's answer for ``response_problem``: a stream is
    judged by its timeline's flags, a body only up to ``JUDGED_BYTES``."""
    if ex.error is not None or ex.tap is None or ex.content_encoding:
        return False
    return ex.timeline is not None or len(ex.tap.kept) <= JUDGED_BYTES


class Shadow:
    """Copies requests to the shadow target; each finished copy goes to ``record`` as
    an ``Exchange`` whose ``shadow_of`` is the production span it copied."""

    def __init__(
        self,
        config: ShadowConfig,
        record: Callable[[Exchange], None],
        timeout_s: float,
        sampling_key: bytes,
    ) -> None:
        self.config = config
        self._key = sampling_key
        self.record = record
        self.counts = ShadowCounts()
        timeout_s = min(timeout_s, config.max_time_s)
        self.pool = UpstreamPool(
            timeout_s=timeout_s,
            connect_timeout_s=min(timeout_s, 10.0),
            max_connections=config.max_inflight,
            recv_buffer=RECV_BUFFER,
        )
        url = config.url
        assert url.host is not None and url.port is not None
        self.origin = Origin(url.scheme, url.host, url.port)
        self._base = str(url).rstrip("/")
        self._threshold = share_threshold(config.share)
        self._models = dict(config.model_map)
        self._extra = [(name, value) for name, value in config.headers]
        self._held = 0
        self.budget = ReadBudget(config.read_rate)
        self._failed_in_row = 0
        self._down_s = DOWN_S[0]
        self._down_until = 0.0
        self._tasks: set[asyncio.Task[None]] = set()

    def wants(self, trace_id: bytes) -> bool:
        """Whether requests of this trace are copied (the same test as the proxy's
        ``--sample``, on the keyed hash of the trace id: ``tailreplay/sampling.py``)."""
        if self._threshold >= 2**64:
            return True
        return in_share(sample_point(trace_id, self._key), self._threshold)

    def copy(self, ex: Exchange, body: bytes, headers: list[tuple[str, str]]) -> None:
        """Send a copy of ``ex`` (its body as the client sent it, and the headers the
        upstream got) unless the bounds are reached; returns at once."""
        c, config = self.counts, self.config
        if (
            c.in_flight >= config.max_inflight
            or self._held + len(body) > config.max_bytes
            or (self._down_until and time.monotonic() < self._down_until)
        ):
            c.dropped += 1
            return
        c.in_flight += 1
        c.sent += 1
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
            ex.req_body = self._body(original.path, body, headers)
            ex.bytes_in = len(ex.req_body)
            ex.path = self._path(original.path)
            sent = self._headers(headers, ex)
            # Recorded as sent (the recorder redacts them as any request's headers).
            ex.headers = [*sent, ("Content-Length", str(ex.bytes_in))]
            await self._exchange(ex, sent)
        except UpstreamError as exc:
            # No status: the 502 or 504 of an UpstreamError is what the proxy would
            # answer a client, and a copy has none; the shadow said nothing.
            ex.error, ex.status = exc.kind, 0
            if exc.message.startswith(MALFORMED):
                self._failed_once("answers what is not HTTP/1.x")
            elif exc.kind in CUT_KINDS:
                self._cut(exc.message)
            elif exc.kind == "upstream_connect":
                self._failed_once("refuses connections")
            else:  # reset or closed: no answer either
                self._failed_once("resets or closes its answers")
        except asyncio.CancelledError:
            ex.error = ex.error or UNFINISHED  # the proxy stopped before the copy ended
        except Exception:  # a bug here must never reach production's side
            log.exception("shadow copy failed")
            ex.error = ex.error or "shadow_internal"
        finally:
            self._held -= len(body)
            self.counts.in_flight -= 1
            ex.finish(time.monotonic_ns())
            if _judged_here(ex):
                # The recorder's verdict, here too, so the metrics and the exit line
                # count what the report counts (a 302's HTML is not an answer).
                assert ex.tap is not None
                ex.error = response_problem(ex.path, ex.status, ex.tap, ex.timeline)
            self.counts.errors += copy_failed(ex)
            self.counts.unfinished += ex.error == UNFINISHED
            self.record(ex)

    def _credential(self, name: str) -> bool:
        lower = name.lower()
        return lower in ACCOUNT_HEADERS or is_secret_name(name, self.config.secret_names)

    def _path(self, path: str) -> str:
        """The request's path, without query parameters that hold credentials (unless
        they are forwarded)."""
        bare, sep, query = path.partition("?")
        if not sep or self.config.forward_auth:
            return path
        kept = [p for p in query.split("&") if not is_secret_name(p.split("=", 1)[0], url=True)]
        return f"{bare}?{'&'.join(kept)}" if kept else bare

    def _cut(self, why: str) -> None:
        self.counts.cut += 1
        self._failed_once(f"answers past the proxy's bounds ({why})")

    def _failed_once(self, why: str) -> None:
        """One more copy refused, reset or cut: past ``DOWN_AFTER`` in a row, the
        shadow is down (a dead or hostile shadow then costs a copy nothing but its
        count)."""
        self._failed_in_row += 1
        if self._failed_in_row >= DOWN_AFTER:
            self._down_until = time.monotonic() + self._down_s
            log.warning(
                "shadow %s %s: copies dropped for %.0f s",
                redact_url(self._base),
                why,
                self._down_s,
            )
            self._down_s = min(self._down_s * 2, DOWN_S[1])
            self._failed_in_row = 0

    def _answered(self) -> None:
        """A copy's answer ended within every bound: the shadow is up."""
        self._failed_in_row, self._down_s, self._down_until = 0, DOWN_S[0], 0.0

    def _body(self, path: str, body: bytes, headers: list[tuple[str, str]]) -> bytes:
        """The copy's body: the model mapped, usage asked for on a stream; a compressed
        body as it is (its bytes cannot be edited)."""
        if encoded(v for n, v in headers if n.lower() == "content-encoding"):
            return body
        if self._models and b'"model"' in body:
            body = _mapped(body, self._models)
        return with_usage_requested(path, body) or body

    def _headers(self, upstream: list[tuple[str, str]], ex: Exchange) -> list[tuple[str, str]]:
        """The upstream's headers without credentials (unless forwarded), the copy's
        span, and ``--shadow-header`` last (the pool writes the shadow's Host)."""
        drop = _REPLACED | ({n.lower() for n, _ in self._extra})
        forward = self.config.forward_auth
        out = [
            (n, v)
            for n, v in upstream
            if n.lower() not in drop and (forward or not self._credential(n))
        ]
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
        reader = _Reader(ex, self.budget, self.counts)
        try:
            ex.read_head(response.status, response.headers)
            response.start(reader)
            while not await response.wait():  # paused: the budget, or the answer's cap
                if reader.cut:
                    ex.error = TOO_LARGE
                    self._cut(f"an answer over {MAX_ANSWER_BYTES >> 20} MiB")
                    break
                await self.budget.turn()
                response.resume()
            else:
                ex.duration_ns = time.monotonic_ns() - ex.t0_ns
                self._answered()
            if reader.throttled:
                ex.error = ex.error or THROTTLED
        finally:
            response.close()  # unfinished (cut): the connection is dropped


class ReadBudget:
    """A token bucket of bytes a second shared by every copy's reader (a quarter of a
    second's worth of burst). A reader that found it empty pauses and waits its turn:
    paused readers are woken one at a time, in order, as the bucket refills, so a
    crowd of them costs one timer, not a wake-up each every few milliseconds."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.burst = rate / 4
        self.tokens = self.burst
        self.at = time.monotonic()
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def take(self, n: int) -> bool:
        """Spend ``n`` bytes; False when the bucket is empty (the reader should pause)."""
        self._refill()
        self.tokens -= n
        return self.tokens > 0

    async def turn(self) -> None:
        """Wait until the bucket holds something and this reader's turn has come."""
        self._refill()
        if self.tokens > 0 and not self._waiting:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._arm()
        await waiter

    def _arm(self) -> None:
        if self._timer is None and self._waiting:
            delay = max(-self.tokens / self.rate, 0.001)
            self._timer = asyncio.get_running_loop().call_later(delay, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._refill()
        while self.tokens > 0 and self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break  # one at a time: what it reads decides whether the next may
        self._arm()


class _Reader:
    """Takes the shadow's answer as it is read: times it, taps it, keeps nothing more;
    asks for a pause when the read budget is spent or the answer is too large."""

    __slots__ = ("budget", "counts", "cut", "ex", "throttled")

    def __init__(self, ex: Exchange, budget: ReadBudget, counts: ShadowCounts) -> None:
        self.ex = ex
        self.budget = budget
        self.counts = counts
        self.cut = False
        self.throttled = False

    def __call__(self, chunk: bytes) -> bool:
        ex = self.ex
        if self.cut:
            return False
        if ex.bytes_out + len(chunk) > MAX_ANSWER_BYTES:
            self.cut = True
            return False
        if chunk:
            now = time.monotonic_ns()
            if ex.timeline is not None:
                ex.timeline.feed(chunk, now)
            elif ex.ttfb_ns is None:
                ex.ttfb_ns = now - ex.t0_ns
            assert ex.tap is not None
            ex.tap.feed(chunk)
            ex.bytes_out += len(chunk)
        if not self.budget.take(len(chunk)):
            if not self.throttled:  # counted once, as it happens: a copy may never end
                self.throttled = True
                self.counts.throttled += 1
            return False
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
