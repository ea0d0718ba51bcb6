"""Which captured requests are retries: the client sending again what just failed.

A request is the retry of an earlier one when both came from the same session (the
record's ``session`` fingerprint: user, session id or API key), carry the same body
(a keyed hash, kept in memory only, in every body mode), and it was sent after the
earlier one ended in an error (a 429, a 5xx, a client abort such as a client-side
timeout) and within ``window_s`` of that. The retry's record gets ``attempt`` (the
earlier's + 1, a first attempt counting 1) and ``retry_of`` (the earlier's span id).
Identical requests in flight together are not retries: neither had failed.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from tailreplay.traces.archive.record import Record

__all__ = ["RETRY_WINDOW_S", "RetryLinker"]

RETRY_WINDOW_S = 60.0
_MAX_PENDING = 100_000
"""Failed requests remembered at most (oldest forgotten first): bounds the memory."""


class RetryLinker:
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
