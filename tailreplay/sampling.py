"""Consistent sampling by trace id that never drops what matters (errors, the tail).

Shared by the proxy's ``--sample`` (which records to keep), its ``--shadow-share``
(which requests to copy) and ``--trace-sample`` (which spans to export) on the
proxy and the replayer. A trace's place in the share is a keyed hash of its id
(``sample_point``), so every process holding the same key keeps the same traces —
a trace is whole or absent, never half-sampled — and a client that picks its own
``traceparent`` cannot pick what is sampled or copied: without the key, every id
it may send falls in the share with the share's probability.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque

import numpy as np

__all__ = [
    "ARCHIVE_KEY",
    "KEY_BYTES",
    "MIN_SECRET_BYTES",
    "RunningP99",
    "TraceSampler",
    "in_share",
    "key_from_secret",
    "new_key",
    "sample_point",
    "share_threshold",
    "unkeyed_point",
]

KEY_BYTES = 32
ARCHIVE_KEY = b"tailreplay: traces sampled from an archive"
"""The key of processes that sample the traces of an archive (the replayer's spans,
``traces export otlp``): fixed, so every worker and shard decides alike. Those ids
are a recording's, which no client chooses while they are sampled."""
MIN_SECRET_BYTES = 16
"""The shortest secret taken as a sampling key: 128 bits, beyond any guessing."""


def new_key() -> bytes:
    """A random sampling key, for a process whose decisions need agree with no other."""
    return os.urandom(KEY_BYTES)


def key_from_secret(secret: bytes) -> bytes:
    """The sampling key for an operator's shared secret (any length from
    ``MIN_SECRET_BYTES``): hashed apart from every other use of the same secret.

    >>> len(key_from_secret(b"0123456789abcdef"))
    32
    """
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"a sampling secret has at least {MIN_SECRET_BYTES} bytes")
    return hashlib.blake2b(secret, digest_size=KEY_BYTES, person=b"tailreplay-share").digest()


def sample_point(trace_id: bytes, key: bytes) -> int:
    """A trace's place in [0, 2^64): a keyed BLAKE2b of its id, uniform whatever ids a
    client chooses, and the same in every process holding ``key``."""
    return int.from_bytes(hashlib.blake2b(trace_id, key=key, digest_size=8).digest(), "big")


def unkeyed_point(trace_id: bytes) -> int:
    """The place of a trace in a record without ``sample_point``: its id's first 8
    bytes, which a proxy that wrote no ``sample_point`` compared with its shares."""
    return int.from_bytes(trace_id[:8], "big")


def share_threshold(share: float) -> int:
    """The bound ``in_share`` compares a point with, for a share in (0, 1]."""
    return int(share * 2**64)


def in_share(point: int, threshold: int) -> bool:
    """Whether a trace at ``point`` (``sample_point``) falls in the share ``threshold``
    stands for: a share of the traces is that share of them whatever their ids, and
    the same ones every time (the proxy's ``--sample`` and ``--shadow-share``, and the
    report that checks them)."""
    return threshold >= 2**64 or point < threshold


class TraceSampler:
    """Keep ``rate`` of traces by their keyed point, plus every error and every tail
    request."""

    def __init__(self, rate: float, key: bytes) -> None:
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"sampling rate {rate} is not in (0, 1]")
        self.rate = rate
        self._key = key
        self._threshold = share_threshold(rate)

    def keep(self, trace_id: bytes | None, *, error: bool = False, tail: bool = False) -> bool:
        if trace_id is None or error or tail or self._threshold >= 2**64:
            return True
        return in_share(sample_point(trace_id, self._key), self._threshold)


class RunningP99:
    """P99 of the last 2,048 durations, refreshed every 256 (cheap, and it adapts).

    ``is_tail`` answers for a live stream of requests what the replayer answers
    over a whole archive: is this request at or above the P99?
    """

    def __init__(self) -> None:
        self._recent: deque[int] = deque(maxlen=2048)
        self._count = 0
        self.value: float | None = None

    def add(self, duration_ns: int) -> None:
        self._recent.append(duration_ns)
        self._count += 1
        if self._count % 256 == 0 or (self.value is None and self._count >= 100):
            self.value = float(np.percentile(np.fromiter(self._recent, dtype=np.int64), 99))

    def is_tail(self, duration_ns: int | None) -> bool:
        """Add ``duration_ns`` and say whether it is at or above the running P99."""
        if duration_ns is None:
            return False
        self.add(duration_ns)
        return self.value is not None and duration_ns >= self.value
