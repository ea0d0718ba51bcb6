"""A closed loop's records by session (``replay --users``): each user claims the next
session, in the order of its first record, and sends its records in order, as the
recorded user did; records without a session are sessions of one, so an archive
without sessions is sent in recorded order.

A session is over once no record of it came within ``SESSION_GAP_S`` of its last
(the usual idle timeout of a web session), or the records ran out. Finding its next
record reads on through other sessions' records, held until their users take them:
at most ``SESSION_GAP_S`` of the recording.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from tailreplay.replayer.schedule import Planned

__all__ = ["SESSION_GAP_S", "SessionFeeder"]

SESSION_GAP_S = 30 * 60.0


class SessionFeeder:
    def __init__(self, items: Iterator[Planned]) -> None:
        self._items = items
        self._done = False
        self._queues: dict[str, deque[Planned]] = {}
        self._last_ns: dict[str, int] = {}
        """Start of each open session's last record read."""
        self._unclaimed: deque[tuple[str | None, Planned | None]] = deque()
        """Sessions not yet claimed, by first record: (key, None), or (None, the record)."""
        self._newest_ns = 0
        self._open: dict[str, str] = {}
        """Each session id's latest session (our key for it)."""
        self._sessions = 0

    def claim(self) -> tuple[str | None, Planned] | None:
        """The next unclaimed session: its key (None: a record without one) and first
        record; None when the records ran out."""
        while not self._unclaimed and self._read():
            pass
        if not self._unclaimed:
            return None
        key, item = self._unclaimed.popleft()
        if key is None:
            assert item is not None
            return None, item
        return key, self._queues[key].popleft()

    def next(self, key: str | None) -> Planned | None:
        """The session's next record (``key`` as ``claim`` gave it), or None: it is over."""
        if key is None:
            return None
        queue = self._queues[key]
        while not queue and not self._over(key) and self._read():
            pass
        if queue:
            return queue.popleft()
        del self._queues[key], self._last_ns[key]
        session = key.rpartition("#")[0]
        if self._open.get(session) == key:
            del self._open[session]
        return None

    def give_back(self, key: str | None, item: Planned) -> None:
        """A session its user left before its end: the next user to claim one takes it
        on, from ``item``."""
        if key is None:
            self._unclaimed.appendleft((None, item))
            return
        self._queues[key].appendleft(item)
        self._unclaimed.appendleft((key, None))

    def _over(self, key: str) -> bool:
        return self._newest_ns - self._last_ns[key] > SESSION_GAP_S * 1e9

    def _read(self) -> bool:
        """One more record into its session's queue; False at the end."""
        if self._done:
            return False
        item = next(self._items, None)
        if item is None:
            self._done = True
            return False
        start, key = item.record.start_ns, item.record.session
        self._newest_ns = max(self._newest_ns, start)
        if key is None:
            self._unclaimed.append((None, item))
            return True
        # A session's records come under one key of ours: the same session id after a
        # gap longer than SESSION_GAP_S is a new session, with a key of its own.
        ours = self._open.get(key)
        if ours is None or start - self._last_ns[ours] > SESSION_GAP_S * 1e9:
            ours = self._open[key] = f"{key}#{self._sessions}"
            self._sessions += 1
            self._queues[ours] = deque()
            self._unclaimed.append((ours, None))
        self._queues[ours].append(item)
        self._last_ns[ours] = start
        return True
