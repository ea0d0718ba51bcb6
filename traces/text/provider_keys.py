"""Providers' credential formats found in text: gitleaks' and Nosey Parker's rule
sets as data (``provider_formats.json``, written by ``scripts/provider_formats.py``;
the sources and their versions are in the file).

Each format is an expression, the keywords one of which its every match holds
(lower-cased), an entropy floor for what it finds and the values it lets be. A
text is searched with the formats whose keywords it holds: one pass of an
expression of every keyword finds those, so a prompt pays for the formats it may
hold, not for all 362. What a format finds is its first group that took part (or
the group its rule names, or every group for a rule that says so), else the whole
match; it counts only above the format's entropy floor
and when no allow-list entry (the rule's or the set's own: placeholders such as
``${VAR}``, ``true``, runs of one letter) matches it.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import ahocorasick_rs
import re2

from tailreplay.traces.text.pattern_set import folded, for_re2
from tailreplay.traces.text.secret_values import PLACEHOLDERS

__all__ = ["Found", "ProviderFormat", "ProviderKeys", "provider_keys", "shannon_entropy"]


_MASK = re.compile(r"\[[A-Z]+:fp:[0-9a-f]{16}\]|fp:[0-9a-f]{16}")
"""A mask made by the rules before this pass: what it covers is masked already."""


@dataclass(frozen=True)
class ProviderFormat:
    id: str
    kind: str
    """What its masks are called: ``KEY``, or ``SECRET`` for passwords."""
    pattern: Any
    """Compiled by RE2 (``re2._Regexp``): linear in the text, whatever the expression."""
    keywords: tuple[str, ...]
    entropy: float
    group: int
    allow: tuple[Any, ...]
    stopwords: tuple[str, ...]


@dataclass(frozen=True)
class Found:
    start: int
    end: int
    format: str
    kind: str


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``'s character distribution (gitleaks' measure)."""
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _secret_groups(m: Any, pattern: Any, named: int) -> list[int]:
    """The groups of ``pattern``'s match ``m`` holding credentials: the rule's
    (``named``); the last unnamed group that took part when it says so (``-1``:
    Nosey Parker's rules capture a host, a user and then the password, an account
    and then its key); else the first unnamed group that took part (alternatives
    each have their own; named groups label parts, as the decoded JWT headers of
    ``jwt-base64``); else the whole match."""
    if named > 0:
        return [named]
    labels = set(pattern.groupindex.values())
    taking = [g for g in range(1, pattern.groups + 1) if g not in labels and m.group(g) is not None]
    if named == -1:
        return taking[-1:] or [0]
    return taking[:1] or [0]


class ProviderKeys:
    """The formats of one data file, searched in text."""

    def __init__(
        self,
        formats: list[ProviderFormat],
        allow: tuple[Any, ...],
        stopwords: tuple[str, ...],
        source: str,
    ) -> None:
        self.formats = formats
        self.source = source
        self._allow = allow
        self._stopwords = stopwords
        self._by_keyword: dict[str, list[int]] = {}
        for i, fmt in enumerate(formats):
            for word in fmt.keywords:
                self._by_keyword.setdefault(word, []).append(i)
        self._words = sorted(self._by_keyword)
        self._automaton = ahocorasick_rs.AhoCorasick(self._words)

    def _opened(self, text: str) -> list[int]:
        """The formats whose keywords ``text`` holds, in the data's order: one pass of
        an Aho-Corasick automaton of every keyword over the folded text (8 ns a
        character; 220 searches for single words cost a hundred times more)."""
        found = self._automaton.find_matches_as_indexes(folded(text), overlapping=True)
        if not found:
            return []
        words = self._words
        by_keyword = self._by_keyword
        return sorted({i for k, _, _ in found for i in by_keyword[words[k]]})

    def find(self, text: str) -> list[Found]:
        """The credentials in ``text``, left to right, none overlapping another."""
        text = for_re2(text)  # the keywords' automaton reads UTF-8 too
        spans: list[Found] = []
        for i in self._opened(text):
            fmt = self.formats[i]
            for m in fmt.pattern.finditer(text):
                for group in _secret_groups(m, fmt.pattern, fmt.group):
                    secret = m.group(group)
                    if secret and self._counts(fmt, secret):
                        spans.append(Found(m.start(group), m.end(group), fmt.id, fmt.kind))
        spans.sort(key=lambda f: (f.start, -f.end))
        kept: list[Found] = []
        for span in spans:
            if not kept or span.start >= kept[-1].end:
                kept.append(span)
        return kept

    def mask(self, text: str, masked: Callable[[str, str], str]) -> str:
        """``text`` with each credential found replaced by ``masked(kind, credential)``;
        masks already in the text (``[KIND:fp:…]``) are left as they are."""
        found = self.find(text)
        if not found:
            return text
        made = [(m.start(), m.end()) for m in _MASK.finditer(text)]
        out: list[str] = []
        pos = 0
        for span in found:
            if any(a < span.end and span.start < b for a, b in made):
                continue
            out += [text[pos : span.start], masked(span.kind, text[span.start : span.end])]
            pos = span.end
        out.append(text[pos:])
        return "".join(out)

    def _counts(self, fmt: ProviderFormat, secret: str) -> bool:
        if fmt.entropy and shannon_entropy(secret) < fmt.entropy:
            return False
        low = secret.lower()
        if low in PLACEHOLDERS:  # `password password` in a .netrc example
            return False
        if any(word in low for word in (*fmt.stopwords, *self._stopwords)):
            return False
        # As gitleaks does, an allow-list expression found anywhere in the secret lets it be.
        return not any(a.search(secret) for a in (*fmt.allow, *self._allow))


@functools.cache
def provider_keys() -> ProviderKeys:
    """The formats shipped with tailreplay (loaded once)."""
    raw = resources.files("tailreplay.traces.text").joinpath("provider_formats.json").read_text()
    doc = json.loads(raw)
    formats = [
        ProviderFormat(
            f["id"],
            f["kind"],
            re2.compile(f["regex"]),
            tuple(f["keywords"]),
            float(f["entropy"]),
            int(f["secret_group"]),
            tuple(re2.compile(a) for a in f["allow"]),
            tuple(w.lower() for w in f["stopwords"]),
        )
        for f in doc["formats"]
    ]
    allow = tuple(re2.compile(a) for a in doc["global_allow"])
    return ProviderKeys(formats, allow, tuple(doc["global_stopwords"]), "; ".join(doc["sources"]))
