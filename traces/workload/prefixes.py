"""How prompts share prefixes: fitted from the records' ``prefix_hashes``, drawn for
synthetic requests.

A record's ``prefix_hashes`` are chained hashes of its prompt's successive blocks of
``BLOCK_TOKENS`` tokens (Mooncake's ``hash_ids``; the proxy computes them the same
way): two prompts share their first k blocks exactly when they share their first k
hashes. An engine with a prefix cache skips the prefill of a cached prefix, so how
much of each prompt was seen before, and how long before, decides how heavy the
prefills are: replayed exactly, a public conversation trace found 540-577 prompt
tokens a request in a simulator's cache; a synthesis with no prefixes found 17.

The model keeps three things, each measured on the recording in time order:

- **roots**: the prompts' first blocks (a system prompt, a tool's preamble). The
  ``MAX_ROOTS`` most common, each with its share of the requests and its length: the
  leading blocks that at least ``ROOT_AGREEMENT`` of the requests starting with it
  share. The other requests start with a block of their own.
- **parents**: the share of requests that extend an earlier request beyond their
  root (a conversation's next turn carries the last turn's prompt and answer), how
  far back that request was (in requests: the cache holds the most recent), and how
  much of its prompt they share (the last block seldom: it held the answer).
- the share of all prompt blocks seen before, for the description.

A synthesis draws, per request in order: a parent (with the fitted share, at a drawn
distance among the requests drawn before it; none when the distance reaches back
before the first), whose root it keeps and whose first blocks it shares (the drawn
share of its own blocks, at most all the parent has); or else a root by its share,
whose blocks it starts with; then blocks of its own. Lengths come from the length
model as before, so a parent may be shorter than the share drawn; the parent is then
the longest near the drawn distance that no request extended yet (``_parent``).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from tailreplay.traces.archive.record import PREFIX_BLOCK_TOKENS

__all__ = [
    "BLOCK_TOKENS",
    "MAX_ROOTS",
    "PrefixDraw",
    "PrefixReuse",
    "fit_prefixes",
]

BLOCK_TOKENS = PREFIX_BLOCK_TOKENS
MAX_ROOTS = 64
ROOT_AGREEMENT = 0.9
"""A root's next block is part of it when this share of its longer requests have it."""
MAX_ROOT_BLOCKS = 64
QUANTILES = 33
"""Points of the distance and reuse distributions kept (every 1/32 of them)."""
FIT_REQUESTS = 200_000
"""Requests with hashes the fit reads at most (the first, in time order): its memory
follows the blocks seen, about 24 a request on a conversation trace."""
HISTORY = 20_000
"""Requests a synthesis remembers as parents: a request whose drawn distance reaches
farther back starts from a root (a conversation trace's P99 distance is about 5,100)."""
MIN_REQUESTS = 10
PARENT_SEARCH = 32
"""Requests on either side of a drawn distance a synthesis looks among for a parent long
enough, and at most 1/``PARENT_REACH`` of the distance: the cache a prefix is found in
holds the most recent blocks, so the distance drawn is kept within an eighth."""
PARENT_REACH = 8


@dataclass(frozen=True)
class PrefixReuse:
    requests: int
    """Requests with prefix hashes the model was fitted on."""
    root_shares: list[float]
    """The most common first blocks: each one's share of the requests."""
    root_blocks: list[int]
    """Each of those roots' length in blocks (``ROOT_AGREEMENT``)."""
    parent_share: float
    """Requests that extend an earlier one beyond their root, of those whose parent
    could lie within the recording (``_parent_share``)."""
    distances: list[float] = field(default_factory=list)
    """``QUANTILES`` points of how many requests back that one was (1: the last)."""
    reuse: list[float] = field(default_factory=list)
    """``QUANTILES`` points of the blocks shared with it over the request's own blocks."""
    seen_share: float = 0.0
    """All prompt blocks that had been seen before, over all prompt blocks."""

    def describe(self) -> str:
        """One line for ``traces fit``."""
        roots = sum(self.root_shares)
        line = (
            f"prefixes: {self.seen_share:.0%} of prompt blocks ({BLOCK_TOKENS} tokens) seen "
            f"before; {len(self.root_shares)} common roots start {roots:.0%} of prompts"
        )
        if self.distances:
            median = self.distances[len(self.distances) // 2]
            line += (
                f"; {self.parent_share:.0%} of those that can extend an earlier request "
                f"(median {median:,.0f} requests back, for a median "
                f"{self.reuse[len(self.reuse) // 2]:.0%} of their blocks)"
            )
        return line


def fit_prefixes(hashes: list[list[int]]) -> PrefixReuse | None:
    """The prefix reuse of prompts whose ``prefix_hashes`` are ``hashes``, in time order
    (an empty list: a prompt without them, left out); None with fewer than
    ``MIN_REQUESTS`` that have them."""
    prompts = [h for h in hashes if h][:FIT_REQUESTS]
    if len(prompts) < MIN_REQUESTS:
        return None
    roots = _roots(prompts)
    lengths = dict(roots)
    owner: dict[int, int] = {}
    distances: list[int] = []
    reuse: list[float] = []
    seen = total = 0
    for i, blocks in enumerate(prompts):
        shared = 0
        while shared < len(blocks) and blocks[shared] in owner:
            shared += 1
        seen += shared
        total += len(blocks)
        if shared > lengths.get(blocks[0], 0):
            parent = owner[blocks[shared - 1]]
            distances.append(i - parent)
            reuse.append(shared / len(blocks))
        for block in blocks:
            owner[block] = i
    points = np.linspace(0, 100, QUANTILES)
    n = len(prompts)
    return PrefixReuse(
        requests=n,
        root_shares=[count / n for _, count in _root_counts(prompts, roots)],
        root_blocks=[length for _, length in roots],
        parent_share=_parent_share(distances, n),
        distances=np.percentile(distances, points).tolist() if distances else [],
        reuse=np.percentile(reuse, points).tolist() if reuse else [],
        seen_share=seen / total if total else 0.0,
    )


def _parent_share(distances: list[int], n: int) -> float:
    """The share of requests that extend an earlier one, among those whose parent could
    be in the recording: request i can extend only one at most i back, so the
    recording's first requests extend fewer, and a synthesis (which takes a parent only
    where its drawn distance reaches back no further than its start) would otherwise
    draw fewer parents than the recording holds."""
    if not distances:
        return 0.0
    ordered = np.sort(np.array(distances))
    reachable = np.searchsorted(ordered, np.arange(n), side="right").mean() / ordered.size
    return min(len(distances) / (n * reachable), 1.0) if reachable > 0 else 0.0


def _roots(prompts: list[list[int]]) -> list[tuple[int, int]]:
    """The ``MAX_ROOTS`` most common first blocks that start more than one prompt, each
    with its length in blocks."""
    firsts = Counter(blocks[0] for blocks in prompts)
    common = [block for block, count in firsts.most_common(MAX_ROOTS) if count > 1]
    members: dict[int, list[list[int]]] = {block: [] for block in common}
    for blocks in prompts:
        if blocks[0] in members:
            members[blocks[0]].append(blocks)
    return [(block, _root_length(members[block])) for block in common]


def _root_length(prompts: list[list[int]]) -> int:
    """How many leading blocks the prompts starting with one root share: the next block
    is the root's while ``ROOT_AGREEMENT`` of the prompts long enough have the same one."""
    length = 1
    while length < MAX_ROOT_BLOCKS:
        longer = [p for p in prompts if len(p) > length]
        if not longer:
            break
        block, count = Counter(p[length] for p in longer).most_common(1)[0]
        if count < ROOT_AGREEMENT * len(longer):
            break
        prompts = [p for p in longer if p[length] == block]
        length += 1
    return length


def _root_counts(prompts: list[list[int]], roots: list[tuple[int, int]]) -> list[tuple[int, int]]:
    firsts = Counter(blocks[0] for blocks in prompts)
    return [(block, firsts[block]) for block, _ in roots]


@dataclass(slots=True)
class _Drawn:
    """A request a synthesis drew: its blocks, its root (-1: one of its own), and whether
    a later request extends it."""

    blocks: list[int]
    root: int
    extended: bool = False


class PrefixDraw:
    """``prefix_hashes`` for synthetic prompts, one request after another (``hashes``):
    the structure ``reuse`` was fitted to. Block ids are drawn from a counter, so a
    synthesis shares no block with its recording (or another synthesis) by accident."""

    def __init__(self, reuse: PrefixReuse, rng: np.random.Generator) -> None:
        self.reuse, self.rng = reuse, rng
        self._history: deque[_Drawn] = deque(maxlen=HISTORY)
        """The last requests drawn."""
        shares = np.array([*reuse.root_shares, max(1.0 - sum(reuse.root_shares), 0.0)])
        self._root_p = shares / shares.sum()
        self._root_ids: list[list[int]] = [[] for _ in reuse.root_shares]
        self._next = 1
        self._points = np.linspace(0.0, 1.0, QUANTILES)

    def hashes(self, input_tokens: int) -> list[int] | None:
        """The next request's blocks for a prompt of ``input_tokens`` (None: no prompt)."""
        if input_tokens <= 0:
            return None
        n = math.ceil(input_tokens / BLOCK_TOKENS)
        r = self.reuse
        blocks: list[int]
        distance = round(self._quantile(r.distances)) if r.distances else 0
        # A parent farther back than the requests drawn so far came before the synthesis
        # began: such a request starts from a root, as the recording's first ones did.
        if 0 < distance <= len(self._history) and self.rng.random() < r.parent_share:
            wanted = max(round(self._quantile(r.reuse) * n), 1)
            parent = self._parent(distance, wanted)
            root = parent.root
            least = r.root_blocks[root] if root >= 0 else 0
            blocks = parent.blocks[: min(max(least, wanted), n, len(parent.blocks))]
        else:
            root = int(self.rng.choice(self._root_p.size, p=self._root_p))
            if root == len(r.root_shares):
                root, blocks = -1, []
            else:
                blocks = self._root(root, min(r.root_blocks[root], n))
        blocks = [*blocks, *self._fresh(n - len(blocks))]
        self._history.append(_Drawn(blocks, root))
        return blocks

    def _parent(self, distance: int, blocks: int) -> _Drawn:
        """The request about ``distance`` back that no request extended yet, with at least
        ``blocks`` blocks to share: the nearest such within the search around it
        (``PARENT_SEARCH``), else the longest of those not extended. A conversation's
        next turn is longer than the last, and the lengths here are drawn apart from
        the prefixes; and a turn is extended once: in Mooncake's conversation and
        synthetic traces, 99.7% and 95.5% of the requests extended were extended by one."""
        history = self._history
        at = distance
        best = history[-at]
        reach = max(1, at // PARENT_REACH)
        for step in range(1, 2 * min(reach, PARENT_SEARCH) + 1):
            if not best.extended and len(best.blocks) >= blocks:
                break
            near = at + (step + 1) // 2 * (1 if step % 2 else -1)
            if not 1 <= near <= len(history):
                continue
            candidate = history[-near]
            if not candidate.extended and (
                best.extended or len(candidate.blocks) > len(best.blocks)
            ):
                best = candidate
        best.extended = True
        return best

    def _quantile(self, points: list[float]) -> float:
        return float(np.interp(self.rng.random(), self._points, points))

    def _root(self, root: int, length: int) -> list[int]:
        ids = self._root_ids[root]
        if len(ids) < length:
            ids.extend(self._fresh(length - len(ids)))
        return ids[:length]

    def _fresh(self, count: int) -> list[int]:
        start = self._next
        self._next += count
        return list(range(start, start + count))
