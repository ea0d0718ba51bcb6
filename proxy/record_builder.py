"""Turning finished exchanges into records: usage, tokens, prefix hashes, redaction,
and which requests are retries of one that failed.

All of it runs in the recorder process (``tailreplay.proxy.recorder_sink``): parsing
usage, tokenising prompts, hashing and redacting cost tens of microseconds a
record, which in the proxy's own process would be taken from forwarding.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable

from tailreplay.dialects import Dialect, dialect_for
from tailreplay.dialects.base import RequestFields
from tailreplay.dialects.usage import Usage
from tailreplay.http.retry_after import retry_after_s
from tailreplay.http.sse import flat_bins
from tailreplay.openai_api import decode_fields, parse_usage, read_answer, response_problem
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.content_coding import decode_body, named_codings
from tailreplay.proxy.exchange import Exchange, ServerSpans
from tailreplay.proxy.openai import request_info
from tailreplay.proxy.prompt_tokens import Calibration, estimate_prompt_tokens
from tailreplay.sampling import RunningP99, TraceSampler, sample_point
from tailreplay.traces.archive.record import PREFIX_BLOCK_TOKENS, Record
from tailreplay.traces.archive.writer import ArchiveWriter
from tailreplay.traces.results.figures import is_error
from tailreplay.traces.text.memo import SizedMemo
from tailreplay.traces.text.prompt_stats import prompt_stats
from tailreplay.traces.text.redact import fingerprint
from tailreplay.traces.text.redact_bodies import redact_body
from tailreplay.traces.text.redact_targets import CleanValues, redact_headers, redact_path
from tailreplay.traces.text.tokens import encode_parts, estimate_tokens, get

__all__ = [
    "RETRY_WINDOW_S",
    "RecordBuilder",
    "RetryLinker",
    "build_record",
    "prefix_hashes",
    "with_body_decoded",
]

log = logging.getLogger("tailreplay.proxy")


def prefix_hashes(tokens: list[int], block: int = PREFIX_BLOCK_TOKENS) -> list[int]:
    """Chained 64-bit hashes of successive ``block``-token blocks (the last may be short).

    Hash i covers tokens [0, (i+1)·block), so two prompts sharing their first k full
    blocks share their first k hashes — Mooncake's ``hash_ids`` semantics.
    """
    out = []
    prev = b""
    for i in range(0, len(tokens), block):
        h = hashlib.blake2b(prev, digest_size=8)
        h.update(array("I", tokens[i : i + block]).tobytes())
        prev = h.digest()
        out.append(int.from_bytes(prev, "big"))
    return out


PROMPT_TOKENS: SizedMemo[list[int]] = SizedMemo(capacity=1 << 18)
"""The tokens of recently seen messages and prompts, up to 256 K tokens (about
10 MB): a conversation's earlier messages are encoded once, not in every request."""


def _session(ex: Exchange, user: str | None, key: bytes) -> str | None:
    if user:
        return fingerprint(key, "user:" + user)
    headers = {k.lower(): v for k, v in ex.headers}
    if "x-session-id" in headers:
        return fingerprint(key, "session:" + headers["x-session-id"])
    for name in ("authorization", "x-api-key", "api-key"):
        if name in headers:
            return fingerprint(key, "key:" + headers[name])
    return None


def _completion_text(dialect: Dialect | None, kept: bytes) -> str | None:
    """The generated text of a whole answer, as its dialect reads it."""
    if dialect is None:
        return None
    try:
        return dialect.answer_text(decode_fields(kept))
    except (ValueError, RecursionError):  # not JSON, or nested past the stack
        return None


def with_body_decoded(ex: Exchange, limit: int) -> Exchange:
    """``ex`` with its request body as the JSON it carries: a body sent with a
    ``Content-Encoding`` decoded (to at most ``limit`` bytes), or None when it cannot
    be; the same ``ex`` when the body has no coding. The proxy forwarded the bytes as
    sent; this is the recorder's own copy (``proxy/content_coding.py``).
    """
    if ex.req_body is None:
        return ex
    codings = named_codings(v for k, v in ex.headers if k.lower() == "content-encoding")
    if not codings:
        return ex
    return dataclasses.replace(ex, req_body=decode_body(ex.req_body, codings, limit))


def build_record(
    ex: Exchange,
    config: ProxyConfig,
    calibration: Calibration | None = None,
    shed: bool = False,
    clean: CleanValues | None = None,
) -> Record:
    """The archive record for a finished exchange (docs/archive-format.md), whose
    request body is decoded already (``with_body_decoded``).

    ``calibration`` learns each model's true prompt counts from its reported usage and
    corrects the estimates of requests that reported none. ``shed``: leave out the
    work the prompt costs (``Record.shed``), for a recorder that is behind. ``clean``:
    the headers and paths found clean so far (for ``config.redact_headers``).
    """
    key = config.fingerprint_key
    dialect = dialect_for(ex.path)
    info = request_info(ex.path, ex.req_body)
    asked = info.fields
    record = Record(
        start_ns=ex.start_ns,
        trace_id=ex.trace_id,
        span_id=ex.span_id,
        parent_span_id=ex.parent_span_id,
        duration_ns=ex.duration_ns,
        ttfb_ns=ex.ttfb_ns,
        ttft_content_ns=ex.ttft_content_ns,
        chunk_gaps_us=(ex.timeline.gaps_us or None) if ex.timeline is not None else None,
        chunk_gaps_more=flat_bins(ex.timeline.more) if ex.timeline is not None else None,
        method=ex.method,
        path=redact_path(ex.path, key, clean),
        status=ex.status,
        req_headers=redact_headers(ex.headers, config.redact_headers, key, clean),
        model=asked.model,
        stream=asked.stream,
        max_tokens=asked.max_tokens,
        session=_session(ex, asked.user, key),
        bytes_in=ex.bytes_in,
        bytes_out=ex.bytes_out,
        error=ex.error,
        shed=shed or None,
        shadow_of=ex.shadow_of,
    )
    # A shadow copy's prompt is its production record's: not analysed a second time.
    shed = shed or ex.shadow_of is not None
    if ex.req_body is not None and config.bodies == "full":
        record.req_body = ex.req_body
    elif ex.req_body is not None and config.bodies == "redacted" and not shed:
        record.req_body = redact_body(ex.req_body, key)
    parts = asked.prompt_parts
    counted = _analyse_prompt(record, parts) if parts is not None and not shed else None
    if parts is not None and shed:
        counted = estimate_tokens("".join(parts))

    if ex.retry_after is not None and ex.status in (429, 503):
        wait = retry_after_s(ex.retry_after)
        record.retry_after_ms = round(wait * 1000) if wait is not None else None
    kept = bytes(ex.tap.kept) if ex.tap is not None else b""
    usage = None
    if ex.tap is not None and not ex.content_encoding:
        if ex.usage_event is None:  # the usual case: the body decoded once for both
            problem, usage = read_answer(ex.path, ex.status, ex.tap, ex.timeline)
        else:
            problem = response_problem(ex.path, ex.status, ex.tap, ex.timeline)
        record.error = record.error or problem
    if usage is None:
        usage = parse_usage(kept + (ex.usage_event or b""), ex.content_encoding, dialect)
    _count_tokens(record, ex, asked, counted, kept, usage, calibration or Calibration())
    return record


def _analyse_prompt(record: Record, parts: list[str]) -> int:
    """The prompt's prefix hashes and statistics set on ``record``; its token count."""
    tokens = encode_parts(parts, PROMPT_TOKENS)
    record.prefix_hashes = prefix_hashes(tokens) or None
    stats = prompt_stats(tokens)
    if stats is not None:
        record.prompt_entropy_mbits, record.prompt_repetition_pm = stats
    return len(tokens)


def _count_tokens(
    record: Record,
    ex: Exchange,
    asked: RequestFields,
    counted: int | None,
    kept: bytes,
    usage: Usage,
    calibration: Calibration,
) -> None:
    """Tokens from the server's usage; else counted here and marked as estimates."""
    record.finish_reason = usage.finish_reason
    estimate = counted
    if counted is not None and asked.messages:
        # A chat: the model's template wraps every message.
        estimate = estimate_prompt_tokens(counted, asked.messages, asked.model)
    if usage.prompt_tokens is not None and usage.completion_tokens is not None:
        record.input_tokens = usage.prompt_tokens
        record.output_tokens = usage.completion_tokens
        record.cached_tokens = usage.cached_tokens
        record.reasoning_tokens = usage.reasoning_tokens
        if record.reasoning_tokens is None and ex.timeline is not None:
            # Anthropic reports no thinking tokens apart: its thinking events count them.
            record.reasoning_tokens = ex.timeline.reasoning or None
        record.tokens_source = "usage"
        if estimate is not None and not record.shed:  # shed: characters, not tokens
            calibration.observe(asked.model, estimated=estimate, reported=usage.prompt_tokens)
    elif estimate is not None and ex.status == 200:
        # No usage from the server (llama.cpp ignores include_usage): count ourselves.
        record.input_tokens = (
            estimate if record.shed else calibration.correct(asked.model, estimate)
        )
        dialect = dialect_for(ex.path)
        if ex.timeline is not None:
            record.output_tokens = ex.timeline.tokens
            record.reasoning_tokens = ex.timeline.reasoning or None
        elif dialect is not None and not dialect.generates:
            record.output_tokens = 0
        else:
            whole = ex.tap is not None and not ex.tap.truncated
            text = _completion_text(dialect, kept) if whole else None
            record.output_tokens = _count(text, record.shed) if text is not None else None
        record.tokens_source = "estimate"


def _count(text: str, shed: bool | None) -> int:
    return estimate_tokens(text) if shed else len(get().encode_ordinary(text))


RETRY_WINDOW_S = 60.0
_MAX_PENDING = 100_000
"""Failed requests remembered at most (oldest forgotten first): bounds the memory."""


class RetryLinker:
    """Which captured requests are retries: the client sending again what just failed.

    A request is the retry of an earlier one when both came from the same session (the
    record's ``session`` fingerprint: user, session id or API key), carry the same body
    (a keyed hash, kept in memory only, in every body mode), and it was sent after the
    earlier one ended in an error (a 429, a 5xx, a client abort such as a client-side
    timeout) and within ``window_s`` of that. The retry's record gets ``attempt`` (the
    earlier's + 1, a first attempt counting 1) and ``retry_of`` (the earlier's span id).
    Identical requests in flight together are not retries: neither had failed."""

    def __init__(self, key: bytes, window_s: float = RETRY_WINDOW_S) -> None:
        self._key = hashlib.blake2b(key, digest_size=32).digest()  # blake2b keys are <= 64 B
        self._window_ns = round(window_s * 1e9)
        self._failed: OrderedDict[tuple[str, bytes], tuple[int, bytes, int]] = OrderedDict()
        """(session, body hash) -> (when it ended, its span id, its attempt), by end."""

    def link(self, record: Record, body: bytes | None) -> None:
        """Mark ``record`` (built in completion order) if it retries a failed request;
        remember it if it failed."""
        if record.session is None or body is None or record.span_id is None:
            return
        self._forget_before(record.start_ns - self._window_ns)
        key = (record.session, hashlib.blake2b(body, key=self._key, digest_size=16).digest())
        earlier = self._failed.pop(key, None)
        if earlier is not None and earlier[0] <= record.start_ns:
            record.attempt, record.retry_of = earlier[2] + 1, earlier[1]
        if record.is_error:
            end = record.start_ns + (record.duration_ns or 0)
            self._failed[key] = (end, record.span_id, record.attempt or 1)
            if len(self._failed) > _MAX_PENDING:
                self._failed.popitem(last=False)

    def _forget_before(self, oldest_ns: int) -> None:
        while self._failed:
            key, (end, _, _) = next(iter(self._failed.items()))
            if end >= oldest_ns:
                return
            del self._failed[key]


class RecordBuilder:
    """Builds records, samples them and hands them to the archive writer (and spans to
    the exporter, when the proxy exports OTLP).

    Runs in the recorder process (``tailreplay.proxy.recorder_sink``), never on the
    request path.
    """

    def __init__(
        self, config: ProxyConfig, writer: ArchiveWriter, spans: ServerSpans | None = None
    ) -> None:
        self.config = config
        self.writer = writer
        self.spans = spans
        self.sampled_out = 0
        self.failed = 0
        self.shed = 0
        """Records built without the prompt's work (``ProxyConfig.shed_after_s``)."""
        after = config.shed_after_s
        self._shed_after_ns = None if after is None else int(after * 1e9)
        self._shed_logged_at = -float("inf")
        self._p99 = RunningP99()
        self.calibration = Calibration()
        """Each model's prompt counts as its server reports them, for the estimates."""
        self._sampler = TraceSampler(config.sample, config.sampling_key)
        # The point goes in the record only when a share depends on it: it lets
        # `report --shadow` tell which traces the shares held, without the key.
        self._point = config.sample < 1 or config.shadow is not None
        self._retries = RetryLinker(config.fingerprint_key)
        self._clean = CleanValues()
        self.on_record: Callable[[Record], None] | None = None
        """Called with every record built (the metrics count tokens from it)."""

    def build(self, ex: Exchange) -> None:
        lag_ns = time.monotonic_ns() - ex.t0_ns - (ex.duration_ns or 0)
        shed = self._shed_after_ns is not None and lag_ns > self._shed_after_ns
        if shed:
            self._count_shed(lag_ns)
        try:
            # Decoded once, for the record, the retry's body hash and the span alike.
            ex = with_body_decoded(ex, self.config.max_body)
            record = build_record(ex, self.config, self.calibration, shed, self._clean)
        except Exception:  # a bug here must not stop the recording of everything else
            self.failed += 1
            log.exception("could not build a record; it is dropped")
            return
        if self._point and record.trace_id is not None:
            record.sample_point = sample_point(record.trace_id, self.config.sampling_key)
        if ex.shadow_of is None:  # a copy is neither a retry nor production's traffic
            self._retries.link(record, ex.req_body)
            if self.on_record is not None:
                self.on_record(record)
        # Sampling keeps errors and requests at or above the running P99: the tail is
        # what a replay stretches, so it must never be sampled away. A shadow's copy is
        # kept by its trace alone, as its original would be: never without it, and
        # never in production's P99.
        copy = ex.shadow_of is not None
        tail = not copy and self._p99.is_tail(record.duration_ns)
        error = not copy and is_error(record.status, record.error)
        if self._sampler.keep(record.trace_id, error=error, tail=tail):
            self.writer.append(record)
        else:
            self.sampled_out += 1
        if self.spans is not None:
            _span(self.spans, ex, record, tail)

    def _count_shed(self, lag_ns: int) -> None:
        self.shed += 1
        now = time.monotonic()
        if now - self._shed_logged_at > 10:  # one line per incident, not per record
            log.warning(
                "the recorder is %.1f s behind: writing records without their prompt's "
                "body, hashes and statistics until it catches up (%d so far)",
                lag_ns / 1e9,
                self.shed,
            )
            self._shed_logged_at = now


def _span(spans: ServerSpans, ex: Exchange, record: Record, tail: bool) -> None:
    body, completion = None, None
    if spans.capture_content and not record.shed:  # the span maker redacts (redact.py)
        kept = bytes(ex.tap.kept) if ex.tap is not None and not ex.tap.stream else b""
        dialect = dialect_for(ex.path)
        body, completion = ex.req_body, _completion_text(dialect, kept) if kept else None
    try:
        spans.emit(record, tail=tail, request_body=body, completion=completion)
    except Exception:  # telemetry must never cost a record
        log.exception("could not make a span")
