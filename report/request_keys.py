"""Requests' identities as numpy arrays, and the join on them.

A request's key is its original exchange's (trace id, span id): 24 bytes, held as one
``KEY`` item a request (``report/side.py`` says whose ids they are). ``KeyIndex``
finds keys among others with whole-array operations: a replay joined to its
recording, or a recording read for the requests a replay sent, costs a sort and a
search, not a Python call a request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["KEY", "KEY_SIZE", "KeyIndex", "keys_of", "same_keys"]

Array = npt.NDArray[Any]
Mask = npt.NDArray[np.bool_]

KEY_SIZE = 24
KEY = np.dtype(f"V{KEY_SIZE}")
"""A trace id (16 bytes) then a span id (8 bytes)."""

# Odd 64-bit multipliers: each word of a key is spread over the whole hash.
_MIX = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xC2B2AE3D27D4EB4F),
    np.uint64(0x165667B19E3779F9),
)


def keys_of(keys: Iterable[bytes]) -> Array:
    """``keys`` (bytes of ``KEY_SIZE``; any other can match no request) as a ``KEY`` array."""
    whole = [k for k in keys if len(k) == KEY_SIZE]
    return np.frombuffer(b"".join(whole), dtype=KEY) if whole else np.zeros(0, dtype=KEY)


def _words(keys: Array) -> Array:
    """Each key as three 64-bit words."""
    return np.ascontiguousarray(keys).view(np.uint64).reshape(-1, 3)


def same_keys(a: Array, b: Array) -> Mask:
    """Item by item, whether ``a`` and ``b`` hold the same key."""
    same: Mask = (_words(a) == _words(b)).all(axis=1)
    return same


def _hash(keys: Array) -> Array:
    w = _words(keys)
    hashed: Array = (w[:, 0] * _MIX[0]) ^ (w[:, 1] * _MIX[1]) ^ (w[:, 2] * _MIX[2])
    return hashed


class KeyIndex:
    """Where each of ``keys`` (those ``keyed``) last occurs: ``find`` and ``contains``.

    Keys are sorted by a 64-bit hash of theirs, which sorts and searches several times
    faster than 24-byte items. When two different keys share a hash (a file made to
    collide), the index sorts the keys themselves instead: slower, as exact.

    >>> KeyIndex(recorded.key, recorded.keyed).find(replayed.key, replayed.keyed)
    """

    def __init__(self, keys: Array, keyed: Mask | None = None) -> None:
        rows = np.flatnonzero(keyed) if keyed is not None else np.arange(len(keys))
        ids = _hash(keys[rows])
        order = np.argsort(ids, kind="stable")  # equal keys keep their order: last is last
        self._rows = rows[order]
        self._ids = ids[order]
        del ids, order
        run = np.flatnonzero(self._ids[1:] == self._ids[:-1])
        ahead, behind = keys[self._rows[run]], keys[self._rows[run + 1]]
        self.hashed = bool(same_keys(ahead, behind).all())
        if not self.hashed:
            self._rows = rows[np.argsort(keys[rows], kind="stable")]
            self._ids = keys[self._rows]
        self._keys = keys  # looked up through ``_rows``: the caller's, not a sorted copy

    def __len__(self) -> int:
        return len(self._rows)

    def find(self, keys: Array, keyed: Mask | None = None) -> Array:
        """For each of ``keys``, the index of its last occurrence in the index's keys, or -1
        (also where not ``keyed``)."""
        found = np.full(len(keys), -1, dtype=np.int64)
        if not len(self._rows) or not len(keys):
            return found
        ids = _hash(keys) if self.hashed else keys
        # The last of the run of ids equal to each one's (the run is one key's).
        at = np.searchsorted(self._ids, ids, side="right") - 1
        hit = at >= 0
        at = np.maximum(at, 0)
        hit &= same_keys(self._keys[self._rows[at]], keys)
        if keyed is not None:
            hit &= keyed
        found[hit] = self._rows[at[hit]]
        return found

    def contains(self, keys: Array, keyed: Mask | None = None) -> Mask:
        """Whether each of ``keys`` (where ``keyed``) is in the index."""
        inside: Mask = self.find(keys, keyed) >= 0
        return inside
