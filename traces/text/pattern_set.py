"""Named regular expressions searched as one alternation, leaving out those that
cannot match a given text.

Each pattern names the literals one of which every match of it holds (its
*gates*: ``("bearer",)``, ``(":", "=")``). A text that holds none of a pattern's
gates cannot match it anywhere, so the alternation searched in that text leaves it
out: the same matches, found sooner. A 4 KB prompt holds few of the literals that
open vendor keys, PEM blocks or command lines, and an alternation's cost grows with
every pattern that can start at a character.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

__all__ = ["Kind", "PatternSet", "folded", "for_re2"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def for_re2(text: str) -> str:
    """``text`` as RE2 can search it: RE2 reads UTF-8, which a lone surrogate (a JSON
    ``\\ud800`` decoded) has none of; each is searched as U+FFFD, one character for
    one, so positions keep."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


Kind = tuple[str, str, tuple[str, ...]]
"""(kind, pattern, gates): a pattern, the kind of what it finds, and the literals
one of which each of its matches holds (a literal without capitals is looked for in
the lower-cased text; no gates: always searched)."""

# Characters that re's case-insensitive matching takes for an ASCII letter and that
# str.lower() does not turn into it: a pattern's `(?i:ookie)` matches "ooKie" with
# the Kelvin sign. Lower-cased gates are looked for in text folded with these too.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def folded(text: str) -> str:
    """``text`` lower-cased as a case-insensitive pattern reads ASCII letters."""
    return text.lower() if text.isascii() else text.translate(_FOLD).lower()


GATED_FROM = 256
"""Texts shorter than this are searched with every pattern: looking for the gates
costs more there than the patterns it would leave out."""


# Characters from the rarest in prose and code to the commonest. A search for one
# character is a memchr (0.03 µs in 4 KB), for a word 2 µs: each gate is looked for
# only in a text that holds its rarest character.
_RARITY = "_@#$%^&*|~`\\<>{}[]0123456789QJZXqjzxKVBPYGFWMUCLDRHSNIOATE:;kvbpygfwmucldrhsnioate-.,"
_Groups = list[tuple[str, list[tuple[str, int]]]]


def _by_rarest(gates: Iterable[tuple[str, int]]) -> _Groups:
    """Gates grouped by their rarest character."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for gate, bits in gates:
        rare = min(gate, key=lambda c: _RARITY.find(c) % (len(_RARITY) + 1))
        groups.setdefault(rare, []).append((gate, bits))
    return list(groups.items())


class PatternSet:
    """Several patterns as one alternation, searched in one pass (so a mask is never
    matched again by a later pattern; at one position the first pattern listed wins).
    Which pattern matched is found afterwards, on the match alone."""

    def __init__(self, kinds: Sequence[Kind], default: str) -> None:
        self._kinds = tuple(kinds)
        self._default = default  # what a match that no pattern matches whole is
        self.every = (1 << len(self._kinds)) - 1
        """The mask of every pattern."""
        # Each gate once, with the patterns it opens (digits open several).
        opened: dict[str, int] = {}
        for i, (_, _, gates) in enumerate(self._kinds):
            for gate in gates:
                opened[gate] = opened.get(gate, 0) | 1 << i
        self._always = sum(1 << i for i, (_, _, gates) in enumerate(self._kinds) if not gates)
        self._exact = _by_rarest(((g, bits) for g, bits in opened.items() if g != g.lower()))
        self._lower = _by_rarest(((g, bits) for g, bits in opened.items() if g == g.lower()))
        self._each = [(kind, re.compile(pattern)) for kind, pattern, _ in self._kinds]
        # A digit gate stands for `\d`, any Unicode digit (Devanagari, full-width): a text with
        # characters past ASCII opens every pattern gated by one.
        self._digits = sum(
            1 << i for i, (_, _, gates) in enumerate(self._kinds) if set(gates) & set("0123456789")
        )

    def for_text(self, text: str) -> int:
        """Which patterns can match in ``text``: a mask for ``search`` and ``kind``."""
        if len(text) < GATED_FROM:
            return self.every
        low = folded(text)
        mask = self._always if text.isascii() else self._always | self._digits
        for groups, searched in ((self._exact, text), (self._lower, low)):
            for rare, gates in groups:
                if rare in searched:
                    for gate, bits in gates:
                        if gate in searched:
                            mask |= bits
        return mask

    @functools.lru_cache(maxsize=64)  # noqa: B019 (two instances, for the process's life)
    def pattern(self, mask: int) -> re.Pattern[str]:
        """The alternation of the patterns in ``mask``, in their order."""
        chosen = [p for i, (_, p, _) in enumerate(self._kinds) if mask >> i & 1]
        return re.compile("|".join(chosen) or "(?!)")

    def kind(self, value: str, mask: int) -> str:
        """The kind of the first pattern in ``mask`` that matches ``value`` whole."""
        for i, (kind, pattern) in enumerate(self._each):
            if mask >> i & 1 and pattern.fullmatch(value):
                return kind
        return self._default
