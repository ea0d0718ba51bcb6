"""Records become OTLP spans: one span per exchange, with the GenAI semantic conventions.

The same function serves the three places spans come from, because all three
hold the same ``Record``: the replayer (a CLIENT span per replayed request,
whose ids are the ``traceparent`` it sent, linked to the recorded original),
the proxy (a SERVER span per captured request, parented on the incoming
``traceparent``), and ``traces export otlp`` (an archive's records with their
recorded timestamps). Spans are made after the exchange has finished, from its
measured times, so making them never sits between a request and its response.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from tailreplay.dialects import operation_name
from tailreplay.exporters.otlp import OtlpOptions, Telemetry
from tailreplay.sampling import ARCHIVE_KEY, TraceSampler, new_key
from tailreplay.traces.archive.record import Record
from tailreplay.traces.results.figures import is_error, percentiles
from tailreplay.traces.results.log_histogram import LogHistogram
from tailreplay.traces.text.redact import redact_text
from tailreplay.traces.text.redact_bodies import redact_value

__all__ = ["RecordSpans", "proxy_spans", "span_attributes", "span_name"]

log = logging.getLogger("tailreplay.proxy")

_ITL = {"p50": 50.0, "p99": 99.0}
_EMPTY = Context()  # no current span: a span made with it is a root unless given a parent


def span_name(record: Record) -> str:
    """``{gen_ai.operation.name} {gen_ai.request.model}``, e.g. ``chat deepseek-r1``; a
    replayed request's is prefixed ``replay `` so that, in the original's trace, the two
    cannot be mistaken for each other. A route no dialect serves is no GenAI operation:
    its span is named as HTTP's conventions name a client span without a route
    template, by its method."""
    op = operation_name(record.path)
    name = f"{op} {record.model}" if op and record.model else op or record.method or "POST"
    return f"replay {name}" if record.orig_trace_id is not None else name


# Record fields copied as they are when present: (attribute, field).
_PLAIN = (
    ("gen_ai.request.model", "model"),
    ("gen_ai.request.max_tokens", "max_tokens"),
    ("gen_ai.usage.input_tokens", "input_tokens"),
    ("gen_ai.usage.output_tokens", "output_tokens"),
    ("http.request.method", "method"),
    ("tailreplay.stream", "stream"),
    ("tailreplay.tokens_source", "tokens_source"),
    ("tailreplay.replay.tail", "tail"),
    ("tailreplay.replay.shard", "shard"),
    ("tailreplay.replay.phase", "phase"),
    ("tailreplay.replay.attempt", "attempt"),
)


def span_attributes(
    record: Record, *, provider: str, server: tuple[str, int] | None
) -> dict[str, Any]:
    """The span's attributes: GenAI semantic conventions, HTTP, and ``tailreplay.*``."""
    a: dict[str, Any] = {"gen_ai.provider.name": provider}
    if (op := operation_name(record.path)) is not None:
        a["gen_ai.operation.name"] = op
    for attribute, name in _PLAIN:
        value = getattr(record, name)
        if value is not None:
            a[attribute] = value
    if record.finish_reason is not None:
        a["gen_ai.response.finish_reasons"] = [record.finish_reason]
    a.update(_http_attributes(record, server))
    a.update(_timing_attributes(record))
    if record.orig_trace_id is not None:
        a["tailreplay.replay.original_trace_id"] = record.orig_trace_id.hex()
    if record.retry_of is not None:
        a["tailreplay.replay.retry_of"] = record.retry_of.hex()
    if record.shadow_of is not None:
        a["tailreplay.shadow_of"] = record.shadow_of.hex()
    return a


def _http_attributes(record: Record, server: tuple[str, int] | None) -> dict[str, Any]:
    """Where the request went and how it ended, in HTTP's semantic conventions."""
    a: dict[str, Any] = {}
    if record.path:
        a["url.path"] = record.path.partition("?")[0]
    if server is not None:
        a["server.address"] = server[0]
        if server[1]:  # 0: a port picked at start that the span's maker never learned
            a["server.port"] = server[1]
    if record.status:
        a["http.response.status_code"] = record.status
    if is_error(record.status, record.error):
        # The HTTP status code as text, else the transport error.
        http_error = record.status is not None and record.status >= 400
        a["error.type"] = str(record.status) if http_error else (record.error or "no_response")
    return a


def _timing_attributes(record: Record) -> dict[str, float]:
    """TTFT, the inter-token latency's summary and the replay's dispatch lag, in ms."""
    a: dict[str, float] = {}
    if record.ttfb_ns is not None:
        a["tailreplay.ttft_ms"] = record.ttfb_ns / 1e6
    if record.chunk_gaps_us:
        gaps = np.asarray(record.chunk_gaps_us, dtype=np.float64) / 1e3
        if record.chunk_gaps_more:  # a long stream: its percentiles off 1% bins
            binned = LogHistogram()
            binned.add(gaps * 1e3)
            binned.add_bins(record.chunk_gaps_more)
            itl = {k: v / 1e3 for k, v in (binned.percentiles(_ITL) or {}).items()}
            longest = max(float(gaps.max()), binned.max() / 1e3)
        else:
            itl, longest = percentiles(gaps, _ITL) or {}, float(gaps.max())
        a["tailreplay.itl.p50_ms"], a["tailreplay.itl.p99_ms"] = itl["p50"], itl["p99"]
        a["tailreplay.itl.max_ms"] = longest
    if record.lag_ns is not None:
        a["tailreplay.replay.lag_ms"] = record.lag_ns / 1e6
    return a


def _input_messages(body: bytes | None, key: bytes) -> str | None:
    """The request's messages (or prompt) as GenAI's ``gen_ai.input.messages`` JSON,
    redacted as ``--bodies redacted`` redacts a body (``traces/text/redact.py``)."""
    if not body:
        return None
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    messages = parsed.get("messages")
    if isinstance(messages, list):
        return json.dumps(redact_value(messages, key), ensure_ascii=False)
    prompt = parsed.get("prompt")
    if isinstance(prompt, str):
        content = redact_text(prompt, key)
        return json.dumps([{"role": "user", "content": content}], ensure_ascii=False)
    return None


class RecordSpans:
    """Makes one span per finished record, sampled by --trace-sample.

    With --otlp-capture-content, the prompt and completion on a span are redacted
    with ``redact_key`` (the proxy hands in its fingerprint key, so a secret masked
    in the archive and on the span has the same mask; else a random key). Traces are
    sampled by ``sampling_key`` (the proxy hands in its own, so its spans and its
    records keep the same traces).
    """

    def __init__(
        self,
        telemetry: Telemetry,
        *,
        kind: SpanKind,
        server: tuple[str, int] | None = None,
        extra: Mapping[str, Any] | None = None,
        redact_key: bytes | None = None,
        sampling_key: bytes = ARCHIVE_KEY,
    ) -> None:
        self.telemetry = telemetry
        self.redact_key = redact_key or os.urandom(32)
        self.kind = kind
        self.server = server
        self.extra = dict(extra or {})
        self.sampler = TraceSampler(telemetry.options.trace_sample, sampling_key)
        self.sampled_out = 0

    @property
    def capture_content(self) -> bool:
        return self.telemetry.options.capture_content

    def close(self) -> tuple[int, int]:
        """Flush and shut the exporter down; returns (spans exported, not delivered)."""
        return self.telemetry.close()

    def emit(
        self,
        record: Record,
        *,
        tail: bool | None = None,
        request_body: bytes | None = None,
        completion: str | None = None,
        kind: SpanKind | None = None,
        also_link: tuple[bytes, bytes] | None = None,
    ) -> bool:
        """Make ``record``'s span, unless sampled out; True if it was made.

        The span's ids are the record's (trace_id, span_id); its parent is
        ``parent_span_id`` when set (a remote parent: the caller's span); the
        recorded original, if any, is a link. ``tail`` overrides record.tail
        for sampling (the proxy knows it from its running P99). ``request_body``
        and ``completion`` become the span's messages with --otlp-capture-content;
        ``also_link`` is one more (trace id, span id) to link to.
        """
        error = is_error(record.status, record.error)
        if not self.sampler.keep(
            record.trace_id, error=error, tail=bool(record.tail if tail is None else tail)
        ):
            self.sampled_out += 1
            return False
        tel = self.telemetry
        start = record.start_ns
        end = start + (record.duration_ns or 0)
        attributes = self._attributes(record, request_body, completion)
        links = []
        if record.orig_trace_id is not None and record.orig_span_id is not None:
            links.append(Link(_remote(record.orig_trace_id, record.orig_span_id)))
        if record.shadow_of is not None and record.trace_id is not None:
            # A proxy's copy to its shadow: a CLIENT span under the production span,
            # linked to it as a replay's span is linked to its original.
            kind = SpanKind.CLIENT
            links.append(Link(_remote(record.trace_id, record.shadow_of)))
        if also_link is not None:
            links.append(Link(_remote(*also_link)))
        parent = _EMPTY
        if record.trace_id is not None and record.parent_span_id is not None:
            parent = trace.set_span_in_context(
                trace.NonRecordingSpan(_remote(record.trace_id, record.parent_span_id)), _EMPTY
            )
        with tel.ids.lock:
            tel.ids.preset(record.trace_id, record.span_id)
            span = tel.tracer.start_span(
                span_name(record),
                context=parent,
                kind=kind or self.kind,
                attributes=attributes,
                links=links,
                start_time=start,
            )
        if record.ttfb_ns is not None:
            span.add_event("first_token", timestamp=start + record.ttfb_ns)
        if error:
            span.set_status(Status(StatusCode.ERROR, attributes["error.type"]))
        span.end(end_time=end)
        tel.emitted += 1
        return True

    def _attributes(
        self, record: Record, request_body: bytes | None, completion: str | None
    ) -> dict[str, Any]:
        options = self.telemetry.options
        attributes = span_attributes(record, provider=options.provider_name, server=self.server)
        attributes.update(self.extra)
        if options.capture_content:
            key = self.redact_key
            if (messages := _input_messages(request_body, key)) is not None:
                attributes["gen_ai.input.messages"] = messages
            if completion is not None:
                content = redact_text(completion, key)
                attributes["gen_ai.output.messages"] = json.dumps(
                    [{"role": "assistant", "content": content}], ensure_ascii=False
                )
        return attributes


def _remote(trace_id: bytes, span_id: bytes) -> SpanContext:
    return SpanContext(
        int.from_bytes(trace_id, "big"),
        int.from_bytes(span_id, "big"),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


@contextmanager
def proxy_spans(
    options: OtlpOptions,
    server: tuple[str, int],
    redact_key: bytes | None = None,
    sampling_key: bytes | None = None,
) -> Iterator[RecordSpans]:
    """The proxy's SERVER spans, one per captured exchange, exported to ``options``.

    ``tailreplay proxy`` hands this (with its options, fingerprint key and sampling
    key bound) to the proxy as ``ProxyConfig.spans``; the recorder process enters it, so spans are
    made and exported off the request path.
    """
    telemetry = Telemetry.start(options, service="tailreplay-proxy", warn=log.warning)
    spans = RecordSpans(
        telemetry,
        kind=SpanKind.SERVER,
        server=server,
        redact_key=redact_key,
        sampling_key=sampling_key or new_key(),
    )
    try:
        yield spans
    finally:
        exported, lost = spans.close()
        log.info("spans: %d exported, %d not delivered", exported, lost)
