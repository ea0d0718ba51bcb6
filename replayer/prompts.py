"""Synthetic prompts: exactly N tokens, with the recorded prefix sharing.

Records captured without bodies keep only their token counts and prefix hashes.
We rebuild a prompt from words that are each one token with their leading space
(" the", " model", ...) in cl100k_base and o200k_base, so a prompt of N words is
N tokens: BPE never merges across those spaces. Block i of a prompt (512 tokens, as the proxy
hashed them) is drawn from the record's i-th prefix hash (and --seed), so records
that shared a prefix in production share the same prefix text here, and a target's
prefix cache sees the recorded sharing; blocks past the recorded hashes are drawn
from the record's own id, so they match no other record's.

A 100k-token prompt (~650 KB) takes 2-3 ms to build: the draws are SHAKE-128
output (two bytes a word), made into text by numpy gathers; whole shared blocks
are kept and reused.

Given the recorded prompt's token entropy (``prompt_entropy_mbits``), the blocks are
drawn from fewer words, as many as make a prompt of that length come out at that
entropy (``vocabulary``); a block drawn from a prefix hash takes the vocabulary of
the record's entropy and length a little rounded (``shared_vocabulary``), so the
records that shared a prefix, asking for about the same, still share its text.
The words are 8,192 (``single_token_words``): every word equally likely, a prompt
reaches up to 13 bits a token, as long as it is long enough to (n tokens hold at
most log2 n bits); real prose and code run 8-10.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tailreplay.replayer.replay_summary import PromptEntropy
from tailreplay.replayer.target_count import TargetCount
from tailreplay.traces.archive.record import PREFIX_BLOCK_TOKENS
from tailreplay.traces.text.prompt_stats import entropy_bits as entropy_bits_of

__all__ = [
    "EntropyTally",
    "PromptMaker",
    "shared_vocabulary",
    "single_token_words",
    "vocabulary",
]

BLOCK_TOKENS = PREFIX_BLOCK_TOKENS
BLOCK_CACHE_BYTES = 32 * 2**20
"""Text of prefix blocks kept for reuse (~3.3 KB a block: about 10,000 blocks)."""
_WIDTH = 16
"""Bytes of the widest word with its leading space, and then some."""
_SMALL_DRAW = 40
"""Prompts up to this many words are made by a join; longer ones by numpy."""
_PIECE_WORDS = 1 << 18
"""Longer prompts are made this many words at a time (a few MB of work at once)."""
_WORDS_FILE = Path(__file__).with_name("single_token_words.txt")


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


_SLOTS = 2**16
"""A draw is two bytes: 65,536 slots, each picking one word."""
_DRAW = np.dtype("<u2")
_NATIVE_DRAW = sys.byteorder == "little"
"""Whether a memoryview reads the draws as ``_DRAW`` does (for short prompts)."""
_FRACTIONAL_BELOW = 64
"""Vocabularies of fewer words than this also come in fractions of a word (see
``_index``): between 64 and 65 words the entropy steps by 0.02 bit already."""
_EXTRA_STEP = 1024
"""Slots moved to one more word at a time between V words and V + 1 (see ``_index``)."""


def whole_vocabulary() -> int:
    """The vocabulary code of every word, drawn as the bytes fall (no entropy asked)."""
    return len(single_token_words()) * _SLOTS


@functools.lru_cache(maxsize=64)
def _index(code: int) -> np.ndarray:
    """Per draw value, the word it picks in vocabulary ``code`` = V * 65536 + extra:
    value b picks word b % V, but for the first ``extra`` values, which pick word V.
    Between V words (extra 0) and about V + 1 words evenly (extra 65536 / (V + 1)),
    the entropy grows by small steps: at 2.5 bits, 5 words give 2.32 and 6 give
    2.58. 128 KB each, the 64 most recent kept."""
    size, extra = divmod(code, _SLOTS)
    index = np.arange(_SLOTS, dtype=np.uint16) % size
    index[:extra] = size
    return index


def _slot_counts(size: int, extra: int) -> np.ndarray:
    """How many of the 65,536 values pick each word in ``_index(size * 65536 + extra)``:
    word j < V is picked by the values b >= extra with b % V == j, word V by extra."""
    q, r = divmod(_SLOTS, size)
    qe, re_ = divmod(extra, size)
    j = np.arange(size)
    counts = q - qe + (j < r).astype(np.int64) - (j < re_)
    return np.append(counts, extra)


@functools.cache
def _codes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every vocabulary code, its entropy and its number of words. Whole vocabularies
    of V words in closed form: 65536 = qV + r values give r words (q + 1) / 65536 of
    the draws and the rest q / 65536."""
    words = len(single_token_words())
    size = np.arange(1, words + 1)
    q, r = np.divmod(_SLOTS, size)
    p_more, p_less = (q + 1) / _SLOTS, q / _SLOTS
    whole = -(r * p_more * np.log2(p_more) + (size - r) * p_less * np.log2(p_less))
    fractions = [
        (v, extra)
        for v in range(1, min(_FRACTIONAL_BELOW, words))
        for extra in range(_EXTRA_STEP, _SLOTS // (v + 1) + 1, _EXTRA_STEP)
    ]
    codes = np.concatenate([size * _SLOTS, [v * _SLOTS + e for v, e in fractions]])
    entropies = np.concatenate([whole, [entropy_bits_of(_slot_counts(v, e)) for v, e in fractions]])
    support = np.concatenate([size, [v + 1 for v, _ in fractions]])
    return codes.astype(np.int64), entropies, support


@functools.cache
def _poisson_c_log_c() -> tuple[np.ndarray, np.ndarray]:
    """log(λ) on a grid from 1e-4 to 1e3, and E[c log2 c] / λ for c ~ Poisson(λ) at each."""
    lam = np.geomspace(1e-4, 1e3, 281)
    c = np.arange(3000.0)  # λ = 1000 plus 60 standard deviations
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(c[1:]))])
    c_log2_c = c * np.log2(np.maximum(c, 1))
    pmf = np.exp(c * np.log(lam)[:, None] - lam[:, None] - log_factorial)
    return np.log(lam), (pmf * c_log2_c).sum(axis=1) / lam


def _shortfall(support: np.ndarray, n: int) -> np.ndarray:
    """On average, by how many bits the token entropy of n draws from ``support``
    equally likely words falls short of log2(support). The empirical entropy is
    log2 n - (1/n) Σ c_j log2 c_j over the words' counts c_j, each about
    Poisson(λ = n / support); past the grid's ends, E[c log2 c] / λ is λ (only pairs
    repeat) or log2 λ + 1 / (2 λ ln 2) (Miller-Madow)."""
    log_lam, mean = _poisson_c_log_c()
    lam = n / support
    inside = np.interp(np.log(lam), log_lam, mean)
    g = np.where(lam < 1e-4, lam, inside)
    g = np.where(lam > 1e3, np.log2(lam) + 1 / (2 * lam * math.log(2)), g)
    shortfall: np.ndarray = np.log2(support) - math.log2(n) + g
    return shortfall


@functools.lru_cache(maxsize=4096)
def vocabulary(entropy_bits: float, tokens: int) -> int:
    """The vocabulary code (``_index``) that gives a prompt of ``tokens`` words the
    token entropy ``entropy_bits`` on average. The empirical entropy of n draws falls
    short of the distribution's (``_shortfall``: about (V - 1) / (2 n ln 2) bits while
    n is many times V, up to log2(V / n) once V passes n), so a short prompt needs more
    words than 2^H, and a prompt of n tokens reaches at most log2 n bits.

    >>> [vocabulary(b, 10_000) // 65536 for b in (3.0, 2.5, 10.0)], vocabulary(0.5, 10) // 65536
    ([8, 5, 1082], 1)
    """
    codes, base, support = _codes()
    expected = base - _shortfall(support, max(tokens, 1))
    return int(codes[int(np.argmin(np.abs(expected - entropy_bits)))])


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
    """The words prompts are drawn from, the most common first: 8,192 of them, each one
    token with a leading space in cl100k_base and in o200k_base
    (``scripts/single_token_words.py`` chose them; tests/replayer/test_synthetic_prompts.py
    checks every one against the tokenizer, so a replay starts without building it)."""
    return tuple(_WORDS_FILE.read_text(encoding="ascii").split())


CHAT_OVERHEAD_TOKENS = 3
"""Tokens the chat rendering adds around one user message's content ("user\\n" ...
"\\n"), in the default encoding; checked against the tokenizer in the tests."""


class PromptMaker:
    """Builds chat messages whose rendered prompt has a given token count.

    ``counted`` is how the target counts them, from its answers' usage
    (``target_count``): later prompts are sized by it so that input lengths match as
    the target counts them.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.words = single_token_words()
        self.counted = TargetCount()
        self.overhead = CHAT_OVERHEAD_TOKENS
        # Each word with its leading space, padded with NULs to one width: a gather and one
        # deletion make the text (no Python loop).
        assert max(len(w) for w in self.words) < _WIDTH
        self._table = np.array([(" " + w).encode() for w in self.words], dtype=f"S{_WIDTH}")
        self._rows = [(" " + w).encode() for w in self.words]
        """The table's rows as bytes, for prompts too short to be worth numpy."""
        self._seed = seed.to_bytes(8, "big", signed=True)
        self._blocks: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self.cached_bytes = 0
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
                picks = np.frombuffer(b"".join(draws), dtype=_DRAW)
                counts += np.bincount(index[picks], minlength=n + 1)
        return entropy_bits_of(counts)

    def text(self, tokens: int, prefix_hashes: list[int] | None, salt: bytes) -> str:
        """``prompt`` as a string."""
        return self.prompt(tokens, prefix_hashes, salt).decode("ascii")

    def _draw(self, key: bytes, size: int) -> bytes:
        """``size`` draws of two bytes, each picking one word, from the seed and the
        block's key."""
        return hashlib.shake_128(self._seed + key).digest(size * _DRAW.itemsize)

    def _words(self, draws: list[bytes], size_v: int) -> bytes:
        """The draws made into words: value b picks word ``_index(size_v)[b]``."""
        if not draws:
            return b""
        joined = b"".join(draws)
        if len(joined) <= _SMALL_DRAW * _DRAW.itemsize and _NATIVE_DRAW:
            # A join beats numpy's fixed cost on short prompts: ``_index`` by arithmetic.
            size, extra = divmod(size_v, _SLOTS)
            rows = self._rows
            return b"".join(
                [rows[size if b < extra else b % size] for b in memoryview(joined).cast("H")]
            )
        index, draws_at_once = _index(size_v), _PIECE_WORDS * _DRAW.itemsize
        pieces = []
        # A piece at a time: a whole 16.8M-token prompt at once held ~700 MB of indices
        # and padded rows while it was made, ten times its text.
        for at in range(0, len(joined), draws_at_once):
            picks = index[np.frombuffer(joined[at : at + draws_at_once], dtype=_DRAW)]
            pieces.append(self._table[picks].tobytes().translate(None, b"\0"))
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

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
        return max(1, self.counted.ours_for(input_tokens) - wrap)

    def rendered_tokens(self, content_tokens: int) -> int:
        """Our count of the rendered prompt for ``content_tokens`` of content."""
        return content_tokens + self.overhead

    def observe(self, ours: int, reported: int) -> None:
        """Fold in a target's prompt_tokens for a prompt that is ``ours`` tokens to us."""
        self.counted.observe(ours, reported)
