"""One proxied exchange in flight, and the sinks that observe it.

The handler fills an ``Exchange`` as the request goes through (timings, status,
bytes, what the response tap kept); sinks — the recorder and the metrics — are
called at request, chunk and completion, and must return at once: anything slow
happens elsewhere. Spans are made from the finished record in the recorder
process, by a ``ServerSpans`` the command line hands in.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, Protocol

from tailreplay.dialects import dialect_for
from tailreplay.http.sse import StreamTimeline
from tailreplay.openai_api import ResponseTap
from tailreplay.traces.archive.record import Record

__all__ = ["Exchange", "ServerSpans", "Sink"]


@dataclass(slots=True, eq=False)
class Exchange:
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes | None
    start_ns: int
    """Wall clock at arrival."""
    t0_ns: int
    """Monotonic clock at arrival; every duration is measured from it."""
    method: str
    path: str
    route: str
    """A bounded label for metrics: a known API path or "other"."""
    headers: list[tuple[str, str]]
    req_body: bytes | None = None
    injected_usage: bool = False
    """The proxy added stream_options.include_usage to this request."""
    status: int = 0
    ttfb_ns: int | None = None
    """First body byte; for SSE (set by ``finish``) the first token event."""
    ttft_content_ns: int | None = None
    """SSE: the first answer token, when reasoning came before it."""
    duration_ns: int | None = None
    timeline: StreamTimeline | None = None
    """SSE responses: the token timeline (tailreplay.http.sse)."""
    bytes_in: int = 0
    bytes_out: int = 0
    error: str | None = None
    tap: ResponseTap | None = None
    content_encoding: str | None = None
    usage_event: bytes | None = None
    """The usage-only SSE event stripped from the client's stream, if any."""
    retry_after: str | None = None
    """The upstream's ``Retry-After`` header, as sent."""
    probe: bool = False
    """The replayer's preflight (``PROBE_HEADER``): forwarded, never recorded."""
    shadow_of: bytes | None = None
    """A copy sent to ``--shadow`` (``proxy/shadow.py``): the span id of the production
    exchange it copied."""

    def read_head(self, status: int, headers: list[tuple[str, str]]) -> bool:
        """Take what the record needs from the response's head (status, encoding,
        ``Retry-After``) and set up the body's tap and, for SSE, its timeline; whether
        the body is SSE."""
        self.status = status
        content_type = ""
        for name, value in headers:
            lower = name.lower()
            if lower == "content-type":
                content_type = value
            elif lower == "content-encoding":
                self.content_encoding = value
            elif lower == "retry-after":
                self.retry_after = value
        is_sse = content_type.startswith("text/event-stream")
        self.tap = ResponseTap(stream=is_sse)
        # A route no dialect serves has no token events to time: its first byte is
        # its first byte, never a guessed token.
        dialect = dialect_for(self.path) if is_sse else None
        if dialect is not None:
            self.timeline = StreamTimeline(dialect)
        return is_sse

    def finish(self, now_ns: int) -> None:
        """The response is over (or abandoned): settle the times sinks and records read."""
        if self.duration_ns is None:
            self.duration_ns = now_ns - self.t0_ns
        timeline = self.timeline
        if timeline is not None:
            timeline.finish(now_ns)
            first, answer = timeline.first_ns, timeline.first_answer_ns
            self.ttfb_ns = first - self.t0_ns if first is not None else None
            if answer is not None and answer != first:
                self.ttft_content_ns = answer - self.t0_ns

    def __reduce__(self) -> tuple[Any, ...]:
        # Every exchange is pickled to the recorder process. The default for a slotted
        # dataclass calls Python-level state methods per object; the constructor with
        # a flat tuple of the fields is about twice as fast.
        return (Exchange, _FIELDS(self))


_FIELDS = attrgetter(*(f.name for f in fields(Exchange)))


class Sink(Protocol):
    def on_request(self, ex: Exchange) -> None: ...

    def on_chunk(self, ex: Exchange, size: int) -> None: ...

    def on_complete(self, ex: Exchange) -> None: ...


class ServerSpans(Protocol):
    """Makes one SERVER span per captured exchange (``exporters.spans.RecordSpans``)."""

    @property
    def capture_content(self) -> bool:
        """Whether spans carry the prompt and completion (--otlp-capture-content), which
        the span maker redacts (``traces/text/redact.py``)."""
        ...

    def emit(
        self,
        record: Record,
        *,
        tail: bool | None = None,
        request_body: bytes | None = None,
        completion: str | None = None,
    ) -> object: ...
