"""What the simulated model answers: how many tokens, which words, why it stopped.

Everything is a deterministic function of the request (its digest) and ``--seed``:
the same request always gets the same answer, whatever the load.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from tailreplay.sim.profiles import EngineProfile
from tailreplay.sim.schema import SimRequest

__all__ = ["natural_length", "plan_output", "plan_reasoning", "words"]

_VOCABULARY = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "it",
    "for",
    "on",
    "with",
    "as",
    "was",
    "by",
    "at",
    "be",
    "this",
    "are",
    "from",
    "or",
    "an",
    "which",
    "not",
    "have",
    "has",
    "but",
    "they",
    "their",
    "one",
    "all",
    "will",
    "more",
    "can",
    "would",
    "there",
    "been",
    "if",
    "when",
    "who",
    "so",
    "into",
    "its",
    "time",
    "only",
    "new",
    "some",
    "could",
    "these",
    "two",
    "may",
    "first",
    "then",
    "do",
    "any",
    "like",
    "my",
    "now",
    "over",
    "such",
    "our",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "back",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "model",
    "token",
    "queue",
    "batch",
    "cache",
    "latency",
    "prompt",
    "server",
    "request",
    "tail",
    "replay",
    "stream",
]


_REASONERS = frozenset(("chat", "responses"))
"""The dialects a reasoning profile answers by thinking first, unasked (as o-series
models and DeepSeek-R1 do)."""


def _rng(req: SimRequest, seed: int, salt: bytes) -> random.Random:
    return random.Random(int.from_bytes(req.digest + salt, "big") ^ seed)


def natural_length(profile: EngineProfile, rng: random.Random) -> int:
    """An answer's length where nothing forces it: a Gamma draw of the profile's mean and
    shape, at least 1 token."""
    shape = profile.output_shape
    return max(1, math.ceil(rng.gammavariate(shape, profile.output_mean / shape)))


def plan_output(
    req: SimRequest, prompt_tokens: int, profile: EngineProfile, seed: int
) -> tuple[int, str]:
    """(output tokens, finish_reason) for ``req``.

    ``ignore_eos`` generates up to the budget (max_tokens, else the context left);
    otherwise a Gamma draw (the profile's mean and shape), at least ``min_tokens``,
    capped by max_tokens ("length") or the context.
    """
    room = max(1, profile.max_model_len - prompt_tokens)
    budget = min(req.max_tokens or room, room)
    if req.ignore_eos:
        return budget, "length"
    natural = max(natural_length(profile, _rng(req, seed, b"len")), req.min_tokens)
    if natural >= budget:
        return budget, "length"
    return natural, "stop"


def plan_reasoning(req: SimRequest, target: int, profile: EngineProfile, seed: int) -> int:
    """How many of a request's ``target`` output tokens are thinking, before the answer.

    A request that asks to think (Anthropic's ``thinking``) thinks for its budget, up
    to ``reasoning_tokens``. Of chat and Responses requests, a share
    (``reasoning_share``), chosen by their digest, think for ``reasoning_tokens``;
    the rest answer at once. At least one answer token is always left.
    """
    if target < 2:
        return 0
    if req.ask.thinking is not None:
        return min(req.ask.thinking, profile.reasoning_tokens, target - 1)
    if req.kind not in _REASONERS or profile.reasoning_share <= 0:
        return 0
    if _rng(req, seed, b"think").random() >= profile.reasoning_share:
        return 0
    return min(profile.reasoning_tokens, target - 1)


def words(req: SimRequest, seed: int) -> Iterator[str]:
    """The text of each output token: words, deterministic per request and seed."""
    rng = _rng(req, seed, b"txt")
    choice, vocab = rng.choice, _VOCABULARY
    yield choice(vocab).capitalize()
    while True:
        yield " " + choice(vocab)
