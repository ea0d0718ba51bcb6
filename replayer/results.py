"""The result record of one planned request: what was due, what was sent, what came back.

One function builds it for every path a planned request can take, so the three
kinds of result agree field by field: sent and answered (or failed), dropped at
``--max-inflight`` (nothing sent), and planned only (``--dry-run``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tailreplay.openai_api import error_message
from tailreplay.replayer.request import RequestSpec
from tailreplay.replayer.schedule import Planned
from tailreplay.replayer.transport import Outcome
from tailreplay.tracecontext import TraceContext
from tailreplay.traces.archive.record import Record
from tailreplay.traces.text.redact import redact_text

__all__ = ["MESSAGE_CHARS", "Sent", "result_record", "target_message"]

MESSAGE_CHARS = 200
"""The most of a target's error message a result record keeps."""

_MASK_KEY = os.urandom(32)
"""Fingerprints in kept messages: a key of this process's own, so a mask cannot be
matched with any other archive's."""


@dataclass(frozen=True, slots=True)
class Sent:
    """When a request left and under which trace context (absent for one never sent)."""

    wall_ns: int
    lag_ns: int
    """Sent minus due, on the monotonic clock (``time.monotonic``)."""
    ctx: TraceContext


def result_record(
    item: Planned,
    intended_ns: int,
    *,
    shard: int | None,
    spec: RequestSpec | None = None,
    outcome: Outcome | None = None,
    sent: Sent | None = None,
) -> Record:
    """The result record for ``item``, due at ``intended_ns`` (unix ns).

    Without ``spec`` and ``outcome`` it is the plan alone (a dry run: the recorded
    request's fields and its output budget); with them, the request as built and
    what the target answered; ``sent`` is None for a request that never left.
    """
    r = item.record
    record = Record(
        start_ns=sent.wall_ns if sent is not None else intended_ns,
        trace_id=sent.ctx.trace_id if sent is not None else None,
        span_id=sent.ctx.span_id if sent is not None else None,
        method=spec.method if spec is not None else r.method,
        path=spec.path if spec is not None else r.path,
        model=r.model,
        session=r.session,
        stream=spec.stream if spec is not None else r.stream,
        input_tokens=r.input_tokens if outcome is None else outcome.prompt_tokens,
        # The budget as sent (a recorded abort's headroom, --body-set), else as planned.
        max_tokens=spec.budget if spec is not None else item.budget,
        prefix_hashes=r.prefix_hashes,
        orig_trace_id=r.trace_id,
        orig_span_id=r.span_id,
        intended_ns=intended_ns,
        sent_ns=sent.wall_ns if sent is not None else None,
        lag_ns=sent.lag_ns if sent is not None else None,
        tail=item.tail,
        shard=shard,
        phase=item.phase,
        attempt=r.attempt,  # a recorded retry stays one (--retries policy sets its own)
    )
    if outcome is not None:
        _answered(record, outcome, spec, sent)
    return record


def _answered(
    record: Record, outcome: Outcome, spec: RequestSpec | None, sent: Sent | None
) -> None:
    """What the target answered (or why nothing was): timings, status, usage, error."""
    record.duration_ns = outcome.duration_ns
    record.ttfb_ns = outcome.ttfb_ns
    record.ttft_content_ns = outcome.ttft_content_ns
    record.chunk_gaps_us = outcome.gaps_us or None
    record.chunk_gaps_more = outcome.gaps_more
    record.status = outcome.status
    if outcome.retry_after_s is not None:
        record.retry_after_ms = round(outcome.retry_after_s * 1000)
    record.output_tokens = outcome.completion_tokens
    record.cached_tokens = outcome.cached_tokens
    record.reasoning_tokens = outcome.reasoning_tokens
    record.tokens_source = outcome.tokens_source
    record.finish_reason = outcome.finish_reason
    if sent is not None:  # a dropped request sent no bytes
        record.bytes_in = len(spec.body) if spec is not None and spec.body else 0
    record.bytes_out = outcome.bytes_out
    if outcome.error:
        record.error = outcome.error
    elif outcome.status >= 400:
        record.error = f"http_{outcome.status}"
    if outcome.error_text and (outcome.status >= 400 or outcome.error == "bad_response"):
        # A refusal's message, or why an answer was not the API's (the reason the
        # summary gives beside bad_response).
        record.error_message = target_message(outcome.error_text)


def target_message(body: str) -> str | None:
    """What a refusal's body says, fit to keep: the server's message (an OpenAI-style
    ``error.message``, else the text), its first line, at most MESSAGE_CHARS long, with
    credentials, emails and numbers masked: an error can echo the prompt it refused."""
    # A JSON escape can decode to a lone surrogate ("\ud800"), which no UTF-8 output
    # (terminal, summary, archive) can carry: it becomes "?".
    text = error_message(body).encode("utf-8", "replace").decode("utf-8")
    # Cut loosely before masking (a secret cut in two could escape its pattern), exactly after.
    first = _one_line(text, 4 * MESSAGE_CHARS)
    return None if first is None else _one_line(redact_text(first, _MASK_KEY))


def _one_line(text: str, limit: int = MESSAGE_CHARS) -> str | None:
    """The first non-blank line of ``text``, spaces collapsed, cut to ``limit`` with "…"."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return line or None
