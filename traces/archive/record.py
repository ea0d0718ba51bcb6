"""The one record type that flows through every stage (docs/archive-format.md).

A ``Record`` is one HTTP exchange: captured by the proxy, read by the replayer,
written again — with the result fields set — as a replay result. On disk it is a
msgpack map whose keys are the field names below; fields that are ``None`` are
omitted, never written as nil.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from tailreplay.traces.results.figures import is_error

__all__ = [
    "BOOL_FIELDS",
    "FIELDS",
    "INT_FIELDS",
    "PREFIX_BLOCK_TOKENS",
    "UNPACKABLE",
    "Record",
    "pack_record",
    "record_to_map",
]

PREFIX_BLOCK_TOKENS = 512
"""Prompt tokens a ``prefix_hashes`` block holds (the last one of a prompt may hold fewer)."""


@dataclass(slots=True)
class Record:
    start_ns: int
    """Wall-clock unix time (ns) when the request arrived (or, for a replay, was sent)."""
    trace_id: bytes | None = None
    span_id: bytes | None = None
    parent_span_id: bytes | None = None
    duration_ns: int | None = None
    ttfb_ns: int | None = None
    """Arrival to the first generated token of any kind (for SSE: the first event with text)."""
    ttft_content_ns: int | None = None
    """Arrival to the first answer token, when reasoning tokens came before it."""
    chunk_gaps_us: list[int] | None = None
    """Inter-token gaps (µs), the first ``tailreplay.http.sse.EXACT_GAPS`` of a stream..."""
    chunk_gaps_more: list[int] | None = None
    """...and the rest, binned: [bin, count, ...] (``tailreplay/http/sse.py``; bin -1
    counts gaps of 0)."""
    method: str | None = None
    path: str | None = None
    status: int | None = None
    req_headers: list[tuple[str, str]] | None = None
    req_body: bytes | None = None
    model: str | None = None
    stream: bool | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    """Every generated token, reasoning included."""
    cached_tokens: int | None = None
    """Prompt tokens served from the server's prefix cache (usage details)."""
    reasoning_tokens: int | None = None
    """Thinking tokens of a reasoning model (inside output_tokens)."""
    tokens_source: str | None = None
    max_tokens: int | None = None
    finish_reason: str | None = None
    prefix_hashes: list[int] | None = None
    """A hash of each ``PREFIX_BLOCK_TOKENS`` block of the prompt, chained (the proxy's
    ``record_builder.prefix_hashes``; Mooncake's ``hash_ids``): equal leading hashes,
    equal leading text."""
    prompt_entropy_mbits: int | None = None
    """The prompt's token-level Shannon entropy, millibits per token
    (``traces/text/prompt_stats.py``)..."""
    prompt_repetition_pm: int | None = None
    """...and the share of its tokens that repeat an earlier one, per mille."""
    session: str | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None
    error: str | None = None
    error_message: str | None = None
    """Replay results: the target's own message for a refused request (first line,
    at most 200 characters, redacted)."""
    retry_after_ms: int | None = None
    """A 429's or 503's ``Retry-After``, in ms."""
    shed: bool | None = None
    """Captures: written while the recorder was behind, without the work a request's
    prompt costs (a redacted body, prefix hashes, prompt statistics; tokens from
    usage, else estimated from characters). True or absent."""
    # Replay result fields.
    orig_trace_id: bytes | None = None
    orig_span_id: bytes | None = None
    intended_ns: int | None = None
    sent_ns: int | None = None
    lag_ns: int | None = None
    tail: bool | None = None
    shard: int | None = None
    phase: str | None = None
    """Replay results: the load shape's phase the request was due in (``step 2 2x``,
    ``base``, ``pulse``); absent for a constant speed or a ramp."""
    attempt: int | None = None
    """A retry's attempt (2 for the first retry, ...): in a capture, a request the proxy
    recognised as one (``RetryLinker``, ``proxy/record_builder.py``); in replay results
    under ``--retries policy``, every attempt's, the first's 1. Absent: a first attempt..."""
    retry_of: bytes | None = None
    """...and for a retry, the span id of the attempt it retried."""
    shadow_of: bytes | None = None
    """Captures made with ``proxy --shadow``: this record is the copy the proxy sent to
    the shadow target of the exchange with this span id (in the same ``trace_id``).
    Readers leave such records out unless asked (``ArchiveReader(shadows=...)``)."""
    sample_point: int | None = None
    """Captures sampled (``--sample`` under 1) or shadowed: the trace's place in
    [0, 2^64) that the proxy compared with those shares (``tailreplay/sampling.py``: a
    keyed hash of the trace id), so a reader can tell which traces the shares held
    without the key."""

    def to_map(self) -> dict[str, Any]:
        """The msgpack map for this record: every set field, nothing else."""
        return record_to_map(self)

    @classmethod
    def from_map(cls, m: dict[str, Any]) -> Record:
        """Build a record from an archive map. Unknown keys (from a newer writer) are ignored."""
        try:
            rec = cls(**m)
        except TypeError:
            rec = cls(**{k: v for k, v in m.items() if k in _FIELD_SET})
        if rec.req_headers is not None:
            rec.req_headers = [(str(k), str(v)) for k, v in rec.req_headers]
        return rec

    @property
    def is_error(self) -> bool:
        return is_error(self.status, self.error)


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Record))
_FIELD_SET = frozenset(FIELDS)

INT_FIELDS = frozenset(
    {
        "start_ns",
        "duration_ns",
        "ttfb_ns",
        "ttft_content_ns",
        "status",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "max_tokens",
        "bytes_in",
        "bytes_out",
        "intended_ns",
        "sent_ns",
        "lag_ns",
        "shard",
        "attempt",
        "retry_after_ms",
        "prompt_entropy_mbits",
        "prompt_repetition_pm",
    }
)
BOOL_FIELDS = frozenset({"stream", "tail", "shed"})


def _compile_to_map() -> Any:
    # Packing is the writer's hot path (>= 300k records/s): a generated function with
    # one attribute load and one test per field is about twice as fast as a
    # comprehension over getattr.
    lines = ["def to_map(r):", "    d = {}"]
    for name in FIELDS:
        lines += [f"    v = r.{name}", f"    if v is not None: d[{name!r}] = v"]
    lines.append("    return d")
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)
    return namespace["to_map"]


_to_map = _compile_to_map()


def record_to_map(record: Record) -> dict[str, Any]:
    """``record.to_map()`` as a plain function, for hot loops."""
    mapping: dict[str, Any] = _to_map(record)
    return mapping


UNPACKABLE = (OverflowError, UnicodeEncodeError, TypeError, ValueError)
"""What msgpack raises for a value it cannot pack."""


def pack_record(pack: Callable[[Any], bytes], record: Record | dict[str, Any]) -> bytes:
    """A record (or an archive map) packed with ``pack`` (a ``msgpack.Packer().pack``).

    Values an archive cannot hold come from what a server or client sent: an integer
    past 64 bits, a string with a lone surrogate (JSON's ``"\\ud800"`` decodes to
    one). They are replaced, the integer by None and the character by ``?``, rather
    than lose the record (or, in a writer's thread, every record after it). Raises one
    of ``UNPACKABLE`` only for a value of a type no record field has.
    """
    # Exact type check: the fastest test, and a Record is never a dict.
    mapping = record if type(record) is dict else _to_map(record)
    try:
        packed: bytes = pack(mapping)
    except UNPACKABLE:
        packed = pack(_encodable(mapping))
    return packed


def _encodable(value: Any) -> Any:
    if type(value) is str:
        return value.encode("utf-8", "replace").decode("utf-8")
    if type(value) is int:
        return value if -(2**63) <= value < 2**64 else None
    if isinstance(value, dict):
        return {k: _encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(v) for v in value]
    return value
