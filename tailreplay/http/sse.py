"""The token timeline of a streamed (SSE) response: which events carry generated text, and when.

The proxy, capturing, and the replayer, measuring its target, feed the same
``StreamTimeline`` with each chunk as it arrives, so TTFT, time to the answer
and inter-token gaps mean one thing on both sides:

- an event is complete at its blank line (two line ends, each ``\\n``, ``\\r\\n`` or
  ``\\r``); its time is the arrival of the chunk that completes it. An event longer
  than 1 MiB keeps its first 64 KiB, which say what it carries;
- an event is a *token event* when its dialect says it carries generated text
  (``Dialect.token_kind``: a chat chunk's non-empty ``content``, a Responses
  ``*.delta`` event, an Anthropic ``content_block_delta``), answer or thinking.
  Keep-alive comments (``: ping``), role-only, usage-only and lifecycle events
  (``response.output_text.done``, ``message_stop``) and ``[DONE]`` are not;
- ``done`` is set by the dialect's closing event (``Dialect.stream_ends``);
- ``first_ns`` is the first token event of any kind (TTFT); ``first_answer_ns``
  the first answer token (later than ``first_ns`` when the model reasoned first);
- ``gaps_us`` holds one gap per token event after the first: the time since the
  previous one. Events completed by the same read arrived together (the network
  or the server's buffering coalesced them): all but the first of them get 0.
  The first ``EXACT_GAPS`` are kept as they are; the gaps after them are counted in
  ``more``, by 1% bins (``bin_of``; 0 gaps by the key -1), so a stream of any
  length costs the same memory and its ITL percentiles stay within 1%.

``tokens`` counts token events: one per generated token for servers that send a
token an event (OpenAI, vLLM, SGLang, llama.cpp), fewer when a server batches.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tailreplay.dialects import Dialect, dialect_named
from tailreplay.dialects.base import NOT_TOKEN, REASONING

__all__ = [
    "EXACT_GAPS",
    "GROWTH",
    "StreamTimeline",
    "bin_middle",
    "bin_of",
    "flat_bins",
    "split_events",
]

EXACT_GAPS = 4096
"""Gaps kept one by one: every answer of up to 4,097 tokens, whole (the usual)."""

# The gaps past the exact ones are counted in bins 1% wide (relative), which keep a
# long series in constant memory with its percentiles within 1%. Bin ``b >= 1`` holds
# values ``v`` with ``1.01^(b-1) <= v < 1.01^b``; bin 0 holds values in (0, 1); a
# value of 0 (tokens that arrived in one read) has no bin, it is counted apart. The
# report's histogram (``traces/results/log_histogram.py``) reads them into the same bins.
GROWTH = 1.01
_LOG = math.log(GROWTH)


def bin_of(value: float) -> int:
    """The bin of a positive ``value``; ``bin_of(1) == 1``, ``bin_of(1000) == 695``."""
    return max(math.floor(math.log(value) / _LOG) + 1, 0)


def bin_middle(b: int) -> float:
    """The geometric middle of bin ``b``: what a percentile read off it reports."""
    return 0.5 if b == 0 else GROWTH ** (b - 0.5)


_BOUNDARY = re.compile(rb"\r\n\r\n|\r\n\r(?=[^\n])|\r\n\n|\r\r\n|\r\r|\n\r\n|\n\r(?=[^\n])|\n\n")
"""A blank line: two line ends, each CRLF, CR or LF (the SSE specification's three),
longest first so that a CRLF is one line end. A CR after a CRLF or LF ends a line only
once the next byte is seen not to be LF, as a CRLF server's blank line may be cut
between its CR and LF; two CRs are a blank line at once (only a CR server sends them)."""
_MAX_PARTIAL = 1 << 20
"""An unfinished event held whole up to this length; a longer one keeps its head."""
_HEAD = 64 << 10


class StreamTimeline:
    """Feed it every chunk with its arrival time (ns, monotonic); read the timeline after."""

    __slots__ = (
        "_clipped",
        "_ends",
        "_kind",
        "_last_ns",
        "_partial",
        "_tail",
        "dialect",
        "done",
        "first_answer_ns",
        "first_ns",
        "gaps_us",
        "malformed",
        "more",
        "reasoning",
        "tokens",
    )

    def __init__(self, dialect: Dialect) -> None:
        self._kind = dialect.token_kind
        self._ends = dialect.stream_ends
        self.dialect = dialect.name
        self.first_ns: int | None = None
        self.first_answer_ns: int | None = None
        self.gaps_us: list[int] = []
        self.more: dict[int, int] = {}
        """Gaps after the first ``EXACT_GAPS``: their count by 1% bin (-1: gaps of 0)."""
        self.tokens = 0
        """Token events, reasoning included."""
        self.reasoning = 0
        """Token events that carried reasoning, not answer."""
        self.done = False
        """``data: [DONE]`` came (OpenAI's chat and completions streams end with it)."""
        self.malformed = 0
        """Events whose data is neither a JSON object nor [DONE]."""
        self._last_ns = 0
        self._partial = bytearray()
        self._clipped = False
        """``_partial`` holds only the head of an event longer than ``_MAX_PARTIAL``."""
        self._tail = b""
        """The last bytes of a clipped event, where its end may have begun."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with the proxy's exchange to the recorder process: a flat tuple.
        state = (
            self.dialect,
            self.first_ns,
            self.first_answer_ns,
            self.gaps_us,
            self.more,
            self.tokens,
            self.reasoning,
            self.done,
            self.malformed,
        )
        return (_restore, state)

    def feed(self, chunk: bytes, now_ns: int) -> None:
        """Take the next chunk of the body, which arrived at ``now_ns``."""
        if (
            not self._partial
            and len(chunk) > 2
            and chunk.find(b"\n\n") == len(chunk) - 2
            and b"\r" not in chunk
        ):
            self._event(chunk, now_ns, first_of_read=True)  # the usual case: one whole event
            return
        first = True
        if self._partial:
            data = self._resume(chunk)
            if data is None:
                return
            if self._clipped:
                # An event that outgrew the cap ends here: its head says what it was.
                first = not self._event(bytes(self._partial), now_ns, first_of_read=True)
                self._partial, self._clipped = bytearray(), False
        else:
            data = chunk
        start = 0
        for m in _BOUNDARY.finditer(data):
            if self._event(data[start : m.end()], now_ns, first_of_read=first):
                first = False
            start = m.end()
        self._keep(data[start:])

    def finish(self, now_ns: int) -> None:
        """The body ended: an event not closed by a blank line still counts."""
        if self._partial:
            self._event(bytes(self._partial), now_ns, first_of_read=True)
            self._partial, self._clipped = bytearray(), False

    def _resume(self, chunk: bytes) -> bytes | None:
        """The bytes to split into events once ``chunk`` joins the unfinished event, or
        None while that event goes on. Only the new bytes (and the 3 before them, a
        boundary cut in two) are searched, so a large event trickled in small reads
        costs its length, not its length squared."""
        if self._clipped:
            joined = self._tail + chunk
            m = _BOUNDARY.search(joined)
            if m is None:
                self._tail = joined[-3:]
                return None
            return joined[m.end() :]
        seen = len(self._partial)
        self._partial += chunk
        if _BOUNDARY.search(self._partial, max(seen - 3, 0)) is not None:
            data = bytes(self._partial)
            self._partial = bytearray()
            return data
        if len(self._partial) > _MAX_PARTIAL:
            self._clip()
        return None

    def _keep(self, rest: bytes) -> None:
        """Hold the start of an event that the read did not finish."""
        self._partial = bytearray(rest)
        if len(rest) > _MAX_PARTIAL:
            self._clip()

    def _clip(self) -> None:
        # Past the cap, the event's head is enough to tell its kind (type and text
        # fields come first in every dialect's events); the rest is searched for the
        # event's end and let go, so a stream's memory stays bounded.
        self._tail = bytes(self._partial[-3:])
        del self._partial[_HEAD:]
        self._clipped = True

    def _event(self, event: bytes, now_ns: int, *, first_of_read: bool) -> bool:
        """Account for one complete event; True if it carried generated text."""
        at = event.find(b"data:")
        if at < 0:
            return False  # a comment (": ping"), or an event with no data
        payload = event[at + 5 :].lstrip()
        if self._ends and _ends(payload, self._ends):
            self.done = True
        if not payload.startswith(b"{"):
            if payload and not payload.startswith(b"[DONE]"):
                self.malformed += 1
            return False
        kind = self._kind(event)
        if kind == NOT_TOKEN:
            return False
        answer = kind != REASONING
        self.tokens += 1
        if not answer:
            self.reasoning += 1
        if self.first_ns is None:
            self.first_ns = now_ns
        else:
            gap = (now_ns - self._last_ns) // 1000 if first_of_read else 0
            if len(self.gaps_us) < EXACT_GAPS:
                self.gaps_us.append(gap)
            else:
                key = bin_of(gap) if gap > 0 else -1
                self.more[key] = self.more.get(key, 0) + 1
        if answer and self.first_answer_ns is None:
            self.first_answer_ns = now_ns
        self._last_ns = now_ns
        return True


def split_events(data: bytes) -> tuple[list[bytes], bytes]:
    """The whole events at the start of ``data``, each with its blank line, and the
    bytes after the last of them (the start of an event still arriving)."""
    events, start = [], 0
    for m in _BOUNDARY.finditer(data):
        events.append(data[start : m.end()])
        start = m.end()
    return events, data[start:]


def _ends(payload: bytes, ends: tuple[bytes, ...]) -> bool:
    """Whether an event's data is one that ends its stream: ``[DONE]`` as the whole
    data, or a quoted event type (``"message_stop"``) anywhere in it, which an answer's
    own text cannot hold unescaped."""
    return any(payload.startswith(end) if end[:1] != b'"' else end in payload for end in ends)


def _restore(
    dialect: str,
    first_ns: int | None,
    first_answer_ns: int | None,
    gaps_us: list[int],
    more: dict[int, int],
    tokens: int,
    reasoning: int,
    done: bool,
    malformed: int,
) -> StreamTimeline:
    timeline = StreamTimeline(dialect_named(dialect))
    timeline.first_ns, timeline.first_answer_ns = first_ns, first_answer_ns
    timeline.gaps_us, timeline.more = gaps_us, more
    timeline.tokens, timeline.reasoning = tokens, reasoning
    timeline.done, timeline.malformed = done, malformed
    return timeline


def flat_bins(more: dict[int, int]) -> list[int] | None:
    """``more`` as an archive holds it (``chunk_gaps_more``): [bin, count, ...] by bin."""
    return [x for b in sorted(more) for x in (b, more[b])] or None
