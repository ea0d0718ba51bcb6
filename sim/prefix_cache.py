"""The prefix cache: prompt blocks whose KV stays in the cache after their sequence.

As in vLLM's automatic prefix caching, a prompt is cut into blocks of
``block_size`` tokens and each full block is named by a chained hash that covers
its tokens and the hash of the block before it, so equal hashes mean equal
prefixes. A block is *pinned* while a running sequence uses it and *free* (cached,
evictable) once none does; free blocks form an LRU that gives way, oldest first,
when running sequences need the room. The engine owns the budget: this class only
knows which blocks exist and how many tokens of them are pinned or free.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

__all__ = ["PrefixCache", "block_hashes"]

_ROOT = 0
"""The parent hash of a prompt's first block (vLLM's ``NONE_HASH``)."""


def block_hashes(tokens: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full ``block_size``-token blocks of ``tokens``.

    Block i's hash covers its tokens and block i-1's hash, as vLLM's
    ``hash_block_tokens`` does with its builtin hash; Python's hash of a tuple of
    ints is the same in every process (no PYTHONHASHSEED salt). About 1.5 ms for
    100k tokens, a tenth of tokenising them (bench/prefix_hash.py).

    >>> len(block_hashes(list(range(40)), 16))
    2
    """
    out = []
    parent = _ROOT
    for end in range(block_size, len(tokens) + 1, block_size):
        parent = hash((parent, tuple(tokens[end - block_size : end])))
        out.append(parent)
    return out


class PrefixCache:
    """The cached blocks: how many running sequences pin each, and the free ones in LRU order."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._refs: dict[int, int] = {}
        """Every cached block's hash -> how many running sequences use it."""
        self._free: OrderedDict[int, None] = OrderedDict()
        """The blocks no running sequence uses, least recently used first."""
        self.evictions = 0

    @property
    def pinned_tokens(self) -> int:
        return (len(self._refs) - len(self._free)) * self.block_size

    @property
    def free_tokens(self) -> int:
        """Tokens of cached blocks no sequence uses: reclaimable room."""
        return len(self._free) * self.block_size

    def __contains__(self, block: int) -> bool:
        return block in self._refs

    def longest_hit(self, hashes: Sequence[int], limit: int) -> int:
        """How many leading blocks of ``hashes`` (at most ``limit``) are cached."""
        n = 0
        for h in hashes[:limit]:
            if h not in self._refs:
                break
            n += 1
        return n

    def free_among(self, hashes: Iterable[int]) -> int:
        """How many of ``hashes`` are cached and free (pinning them takes their room)."""
        return sum(h in self._free for h in hashes)

    def pin(self, block: int) -> None:
        """A running sequence uses ``block``: a cached one, or one it has just computed."""
        refs = self._refs.get(block, 0)
        if refs == 0 and block in self._refs:
            del self._free[block]
        self._refs[block] = refs + 1

    def release(self, blocks: Sequence[int]) -> None:
        """A sequence no longer uses ``blocks`` (its prompt's, in order).

        They are released last block first, as vLLM frees them, so that a prompt's
        tail is evicted before its head: a later block is worthless without the
        ones before it.
        """
        for block in reversed(blocks):
            refs = self._refs[block] - 1
            self._refs[block] = refs
            if refs == 0:
                self._free[block] = None

    def evict_one(self) -> bool:
        """Drop the least recently used free block; False when there is none."""
        if not self._free:
            return False
        block, _ = self._free.popitem(last=False)
        del self._refs[block]
        self.evictions += 1
        return True
