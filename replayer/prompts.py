"""Synthetic prompts: exactly N tokens, with the recorded prefix sharing.

Records captured without bodies keep only their token counts and prefix hashes.
We rebuild a prompt from words that are each one cl100k_base token with their
leading space (" the", " model", ...), so a prompt of N words is N tokens — BPE
never merges across those spaces. Block i of a prompt (512 tokens, as the proxy
hashed them) is drawn from the record's i-th prefix hash (and --seed), so records
that shared a prefix in production share the same prefix text here, and a target's
prefix cache sees the recorded sharing; blocks past the recorded hashes are drawn
from the record's own id, so they match no other record's.

A 100k-token prompt (~650 KB) takes about 2 ms to build: the draws are SHAKE-128
output (one byte a word), made into text by one numpy gather; whole shared blocks
are kept and reused.

Given the recorded prompt's token entropy (``prompt_entropy_mbits``), the blocks are
drawn from fewer words, as many as make a prompt of that length come out at that
entropy (``vocabulary``); a block drawn from a prefix hash takes the vocabulary of
the record's entropy and length a little rounded (``shared_vocabulary``), so the
records that shared a prefix, asking for about the same, still share its text.
Every word equally likely, the most a prompt reaches is log2(211 words) = 7.7 bits
a token; real prose and code run 8-10.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from tailreplay.replayer.replay_summary import PromptEntropy
from tailreplay.traces.text.prompt_stats import entropy_bits as entropy_bits_of

__all__ = [
    "EntropyTally",
    "PromptMaker",
    "shared_vocabulary",
    "single_token_words",
    "vocabulary",
]

BLOCK_TOKENS = 512
BLOCK_CACHE_BYTES = 32 * 2**20
"""Text of prefix blocks kept for reuse (~3.3 KB a block: about 10,000 blocks)."""
_WIDTH = 16
"""Bytes of the widest candidate word with its leading space, and then some."""
_SMALL_DRAW = 80
"""Draws up to this many bytes are made into words by a join; longer ones by numpy."""
_MIN_CORRECTION, _MAX_CORRECTION = 0.5, 2.0
_CANDIDATES = (  # noqa: SIM905 - reads better as text
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work government number night point home water room mother area money story "
    "fact month lot right study book eye job word business issue side kind head house "
    "service friend father power hour game line end member law car city community name "
    "president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason "
    "research girl guy moment air teacher force education foot boy age policy music "
    "market sense nation plan college interest death experience effect use class control "
    "care field development role effort rate heart drug show leader light voice wife "
    "police mind price report decision son view relationship town road arm difference "
    "value building action model season society tax director position player record "
    "paper space ground form event official matter center couple site project activity "
    "star table need court oil situation cost industry figure street image phone data "
    "picture practice piece land product doctor wall patient worker news test movie "
    "north love support technology step baby computer type attention film tree source "
    "organization hair window evidence population site training memory river field sound "
).split()


@dataclass
class EntropyTally:
    prompts: int = 0
    intended_bits: float = 0.0
    achieved_bits: float = 0.0

    def add(self, intended: float, achieved: float) -> None:
        self.prompts += 1
        self.intended_bits += intended
        self.achieved_bits += achieved

    def summary(self) -> PromptEntropy | None:
        """Mean bits per token asked for and achieved; None when no prompt asked."""
        if not self.prompts:
            return None
        return PromptEntropy(
            prompts=self.prompts,
            intended_bits=self.intended_bits / self.prompts,
            achieved_bits=self.achieved_bits / self.prompts,
        )


def _rows(table: np.ndarray) -> list[bytes]:
    """A word table's rows as bytes, the NUL padding gone."""
    return [row.rstrip(b"\0") for row in table.tolist()]


_SLOTS = 256
"""A draw is one byte: 256 slots, each picking one word."""
_EXTRA_STEP = 4
"""Slots moved to one more word at a time between V words and V + 1 (see ``_index``)."""


def whole_vocabulary() -> int:
    """The vocabulary code of every word, drawn as the bytes fall (no entropy asked)."""
    return len(single_token_words()) * _SLOTS


@functools.cache
def _index(code: int) -> np.ndarray:
    """Per byte value, the word it picks in vocabulary ``code`` = V * 256 + extra: byte
    b picks word b % V, but for the first ``extra`` bytes, which pick word V. Between
    V words (extra 0) and about V + 1 words evenly (extra 256 / (V + 1)), the entropy
    grows by small steps: at 2.5 bits, 5 words give 2.32 and 6 give 2.58."""
    size, extra = divmod(code, _SLOTS)
    index = np.arange(_SLOTS) % size
    index[:extra] = size
    return index


@functools.cache
def _codes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every vocabulary code, its entropy and its number of words."""
    words = len(single_token_words())
    codes = [
        size * _SLOTS + extra
        for size in range(1, words + 1)
        for extra in range(0, (_SLOTS // (size + 1) if size < words else 0) + 1, _EXTRA_STEP)
    ]
    entropies = [entropy_bits_of(np.bincount(_index(c), minlength=words + 1)) for c in codes]
    support = [c // _SLOTS + (c % _SLOTS > 0) for c in codes]
    return np.array(codes), np.array(entropies), np.array(support)


@functools.lru_cache(maxsize=4096)
def vocabulary(entropy_bits: float, tokens: int) -> int:
    """The vocabulary code (``_index``) that gives a prompt of ``tokens`` words the
    token entropy ``entropy_bits``: the empirical entropy of n draws falls short of the
    distribution's by about (V - 1) / (2 n ln 2) bits (Miller-Madow), so a short
    prompt needs more words than 2^H. That estimate grows with V only up to V = 2n, so
    no more words than that are considered (and a prompt of n tokens cannot reach more
    than log2 n bits anyway).

    >>> [vocabulary(b, 10_000) // 256 for b in (3.0, 2.5)], vocabulary(0.5, 10) // 256
    ([8, 5], 1)
    """
    codes, base, support = _codes()
    n = max(tokens, 1)
    expected = base - (support - 1) / (2 * n * math.log(2))
    usable = support <= 2 * n
    gaps = np.where(usable, np.abs(expected - entropy_bits), np.inf)
    return int(codes[int(np.argmin(gaps))])


SHARED_BITS_STEP = 0.05
"""A shared block's entropy is the record's to this step (see ``shared_vocabulary``)."""


def shared_vocabulary(entropy_bits: float, tokens: int) -> int:
    """The vocabulary of a block drawn from a prefix hash: ``vocabulary`` of the
    record's entropy to ``SHARED_BITS_STEP`` and of its length to a power of the
    square root of two. Records that share a prefix (a system prompt's, a
    conversation's) and ask for about the same entropy at about the same length
    draw the same words for it, so a target's prefix cache still sees the sharing,
    and each prompt comes out within a few hundredths of a bit of what it asked
    for; records that differ more get text of their own for that block.

    >>> shared_vocabulary(4.5, 1000) == shared_vocabulary(4.51, 1050)
    True
    """
    bits = round(entropy_bits / SHARED_BITS_STEP) * SHARED_BITS_STEP
    length = round(2 ** (round(2 * math.log2(max(tokens, 1))) / 2))
    return vocabulary(bits, length)


@functools.cache
def single_token_words() -> tuple[str, ...]:
    """The candidate words, each one token with a leading space in the default
    encoding (cl100k_base): tests/test_synthetic_prompts.py checks every one against
    the tokenizer, so a replay starts without building it (about 0.5 s)."""
    return tuple(sorted(set(_CANDIDATES)))


CHAT_OVERHEAD_TOKENS = 3
"""Tokens the chat rendering adds around one user message's content ("user\\n" ...
"\\n"), in the default encoding; checked against the tokenizer in the tests."""


class PromptMaker:
    """Builds chat messages whose rendered prompt has a given token count.

    ``correction`` is the ratio the target's own tokenizer reported (its
    prompt_tokens / ours): later prompts are scaled by its inverse so that input
    lengths match as the target counts them.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.words = single_token_words()
        self.correction = 1.0
        self._samples = 0
        self.overhead = CHAT_OVERHEAD_TOKENS
        # Byte b of a draw picks word b % len(words), each with its leading space, padded
        # with NULs to one width: a gather and one deletion make the text (no Python loop).
        assert max(len(w) for w in self.words) < _WIDTH
        self._table = np.array(
            [(" " + self.words[b % len(self.words)]).encode() for b in range(256)],
            dtype=f"S{_WIDTH}",
        )
        self._row_list = _rows(self._table)
        """The table's rows as bytes, for prompts too short to be worth numpy."""
        self._row_lists: dict[int, list[bytes]] = {}
        self._seed = seed.to_bytes(8, "big", signed=True)
        self._blocks: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self.cached_bytes = 0
        self._tables: dict[int, np.ndarray] = {}
        self.entropy = EntropyTally()
        """Entropy asked for and achieved, over the prompts drawn to one."""

    def prompt(
        self,
        tokens: int,
        prefix_hashes: list[int] | None,
        salt: bytes,
        entropy_bits: float | None = None,
        *,
        tally: bool = True,
    ) -> bytes:
        """``tokens`` words, ASCII (safe inside a JSON string as they are); block i follows
        prefix_hashes[i] when there is one, else a draw from ``salt`` (stable across runs);
        the blocks not shared from the vocabulary that gives ``entropy_bits``, if asked.

        >>> PromptMaker().prompt(3, [7], b"r1") == PromptMaker().prompt(3, [7], b"r2")
        True
        """
        whole = whole_vocabulary()
        size_v = whole if entropy_bits is None else vocabulary(entropy_bits, tokens)
        size_h = whole if entropy_bits is None else shared_vocabulary(entropy_bits, tokens)
        parts: list[bytes] = []
        pending: list[bytes] = []  # draws of consecutive blocks, made into words at once
        own: list[bytes] = []  # the draws not shared, and (for the entropy achieved)
        shared: list[bytes] = []  # those of the shared blocks
        for i in range((tokens + BLOCK_TOKENS - 1) // BLOCK_TOKENS):
            size = min(BLOCK_TOKENS, tokens - i * BLOCK_TOKENS)
            if prefix_hashes and i < len(prefix_hashes):
                key = b"h" + str(prefix_hashes[i]).encode()
                if size == BLOCK_TOKENS:
                    block = self._shared_block(prefix_hashes[i], size_h)
                    parts += (self._words(pending, size_v), block)
                    pending = []
                    if entropy_bits is not None:
                        shared.append(self._draw(key, size))
                    continue
            else:
                key = b"s" + salt + i.to_bytes(4, "big")
            pending.append(self._draw(key, size))
            own.append(pending[-1])
        parts.append(self._words(pending, size_v))
        if entropy_bits is not None and tally:
            self.entropy.add(entropy_bits, self._entropy_of(own, size_v, shared, size_h))
        return b"".join(parts)

    def _entropy_of(self, own: list[bytes], size_v: int, shared: list[bytes], size_h: int) -> float:
        """The token entropy of a prompt built from these draws (each word one token)."""
        n = len(self.words)
        counts = np.zeros(n + 1, dtype=np.int64)
        for draws, index in ((own, _index(size_v)), (shared, _index(size_h))):
            if draws:
                picks = np.frombuffer(b"".join(draws), dtype=np.uint8)
                counts += np.bincount(index[picks], minlength=n + 1)
        return entropy_bits_of(counts)

    def text(self, tokens: int, prefix_hashes: list[int] | None, salt: bytes) -> str:
        """``prompt`` as a string."""
        return self.prompt(tokens, prefix_hashes, salt).decode("ascii")

    def _draw(self, key: bytes, size: int) -> bytes:
        """``size`` bytes, each picking one word, from the seed and the block's key."""
        return hashlib.shake_128(self._seed + key).digest(size)

    def _words(self, draws: list[bytes], size_v: int | None = None) -> bytes:
        """The draws made into words: byte b picks word ``_index(size_v)[b]``."""
        if not draws:
            return b""
        joined = b"".join(draws)
        whole = size_v in (None, whole_vocabulary())
        if len(joined) <= _SMALL_DRAW:  # a join beats numpy's fixed cost on short prompts
            words = self._row_list if whole else self._rows_of(size_v or 0)
            return b"".join(map(words.__getitem__, joined))
        picks = np.frombuffer(joined, dtype=np.uint8)
        table = self._table if whole else self._table_of(size_v or 0)
        return table[picks].tobytes().translate(None, b"\0")

    def _rows_of(self, size_v: int) -> list[bytes]:
        """``_table_of(size_v)``'s rows as bytes (the join's twin of the table)."""
        rows = self._row_lists.get(size_v)
        if rows is None:
            rows = self._row_lists[size_v] = _rows(self._table_of(size_v))
        return rows

    def _table_of(self, size_v: int) -> np.ndarray:
        table: np.ndarray | None = self._tables.get(size_v)
        if table is None:  # one per vocabulary size: 211 at most, ~3.4 KB each
            table = self._tables[size_v] = self._table[_index(size_v)]
        return table

    def _shared_block(self, block: int, size_v: int) -> bytes:
        """A whole block drawn from prefix hash ``block`` among ``size_v`` words, kept
        for the records that share it (the least recently used go first beyond
        BLOCK_CACHE_BYTES)."""
        cached = (block, size_v)
        text = self._blocks.get(cached)
        if text is not None:
            self._blocks.move_to_end(cached)
            return text
        text = self._words([self._draw(b"h" + str(block).encode(), BLOCK_TOKENS)], size_v)
        self._blocks[cached] = text
        self.cached_bytes += len(text)
        while self.cached_bytes > BLOCK_CACHE_BYTES:
            _, old = self._blocks.popitem(last=False)
            self.cached_bytes -= len(old)
        return text

    def content_tokens(self, input_tokens: int, overhead: int | None = None) -> int:
        """Content tokens to send for a prompt that should count ``input_tokens``, of
        which ``overhead`` are the wrapping's (a chat message's role; by default
        ``self.overhead``, 0 for a bare prompt)."""
        wrap = self.overhead if overhead is None else overhead
        return max(1, round(input_tokens / self.correction) - wrap)

    def rendered_tokens(self, content_tokens: int) -> int:
        """Our count of the rendered prompt for ``content_tokens`` of content."""
        return content_tokens + self.overhead

    def observe(self, ours: int, reported: int) -> None:
        """Fold in a target's prompt_tokens for a prompt that is ``ours`` tokens to us."""
        if ours <= 0 or reported <= 0:
            return
        self._samples += 1
        # A running mean over the first 100 observations, then an EMA: quick to settle,
        # then steady.
        weight = 1.0 / min(self._samples, 100)
        self.correction += weight * (reported / ours - self.correction)
        # Tokenizers differ by tens of percent, not by factors; a target whose usage
        # does not follow what we send (a fixed mock) must not blow prompts up.
        self.correction = min(max(self.correction, _MIN_CORRECTION), _MAX_CORRECTION)
