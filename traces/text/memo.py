"""A least-recently-used memo bounded by the size of what it holds, not its count.

Chat traffic repeats itself: every request of a conversation carries the whole
conversation so far, and most carry one of a few system prompts. The recorder
redacts and tokenises each request's texts; remembering the results for the texts
it saw recently turns the repeated part of a request into a lookup, and leaves
only the new messages to work on. A count bound (``functools.lru_cache``) would
let a few large texts take any amount of memory, so this one counts characters
(or tokens): its owner says how large each entry is.

It holds text that may be secret, in memory only, in the process that already
holds that text; nothing in it reaches disk.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["SizedMemo"]

V = TypeVar("V")


class SizedMemo(Generic[V]):
    """Values by key, the least recently used dropped first once their sizes add up
    past ``capacity``. An entry larger than a quarter of the capacity is not kept:
    one huge request must not flush what every other request shares."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: Hashable, value: V, size: int) -> None:
        if size > self.capacity // 4 or key in self._entries:
            return
        self._entries[key] = (value, size)
        self.size += size
        while self.size > self.capacity:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.size -= dropped
