"""Synthetic prompts: exactly N tokens, with the recorded prefix sharing.

Records captured without bodies keep only their token counts and prefix hashes.
We rebuild a prompt from words that are each one cl100k_base token with their
leading space (" the", " model", ...), so a prompt of N words is N tokens — BPE
never merges across those spaces. Block i of a prompt (512 tokens, as the proxy
hashed them) is drawn from a generator seeded by the record's i-th prefix hash,
so records that shared a prefix in production share the same prefix text here,
and a target's prefix cache sees the recorded sharing.
"""

from __future__ import annotations

import functools
import hashlib
import random

from tailreplay.openai_api import chat_text
from tailreplay.traces.tokens import count_tokens, get

__all__ = ["PromptMaker", "single_token_words"]

BLOCK_TOKENS = 512
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


@functools.cache
def single_token_words() -> tuple[str, ...]:
    """The candidate words that are one token with a leading space (checked once)."""
    enc = get()
    words = tuple(sorted({w for w in _CANDIDATES if len(enc.encode_ordinary(" " + w)) == 1}))
    assert len(words) >= 64, "the tokenizer splits too many common words"
    return words


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
        # Tokens the chat rendering adds around the content ("user\n" ... "\n").
        self.overhead = count_tokens(chat_text([{"role": "user", "content": "x"}])) - 1

    def text(self, tokens: int, prefix_hashes: list[int] | None, salt: bytes) -> str:
        """``tokens`` words; block i follows prefix_hashes[i] when there is one."""
        words, out = self.words, []
        n_blocks = (tokens + BLOCK_TOKENS - 1) // BLOCK_TOKENS
        for i in range(n_blocks):
            size = min(BLOCK_TOKENS, tokens - i * BLOCK_TOKENS)
            if prefix_hashes and i < len(prefix_hashes):
                rng = random.Random(prefix_hashes[i] ^ self.seed)
            else:  # no recorded prefix: a seed from the record itself (stable across runs)
                digest = hashlib.blake2b(salt + i.to_bytes(4, "big"), digest_size=8).digest()
                rng = random.Random(int.from_bytes(digest, "big") ^ self.seed)
            out.extend(rng.choices(words, k=size))
        return " " + " ".join(out) if out else ""

    def content_tokens(self, input_tokens: int) -> int:
        """Content tokens to send for a prompt that should count ``input_tokens``."""
        return max(1, round(input_tokens / self.correction) - self.overhead)

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
