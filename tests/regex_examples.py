"""A random string an expression matches, built from the expression's parse tree
(``re._parser``): the example credential for each provider format in the tests.

Repeats take a random count within their bounds (an unbounded one at most 8 past its
least), a branch or a set a random member, a word boundary or an anchor nothing; any
character (now and then a space) and a class such as ``\\w`` are drawn from ASCII.
The result is checked against the expression: an expression with lookarounds or
backreferences may need another draw.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable
from re import _constants as C
from re import _parser as P
from typing import Any

__all__ = ["example"]

_CATEGORIES = {
    C.CATEGORY_DIGIT: string.digits,
    C.CATEGORY_NOT_DIGIT: string.ascii_letters + "_-",
    C.CATEGORY_SPACE: " ",
    C.CATEGORY_NOT_SPACE: string.ascii_letters + string.digits,
    C.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    C.CATEGORY_NOT_WORD: " -.",
}
_PRINTABLE = string.ascii_letters + string.digits + "_-."
_UNBOUNDED_EXTRA = 8


def _set_members(items: list[tuple[Any, Any]], ignore_case: bool) -> str:
    negate = any(op is C.NEGATE for op, _ in items)
    members: set[str] = set()
    for op, av in items:
        if op is C.LITERAL:
            members.add(chr(av))
        elif op is C.RANGE:
            lo, hi = av
            members.update(chr(c) for c in range(lo, min(hi, 0x7E) + 1))
        elif op is C.CATEGORY:
            members.update(_CATEGORIES.get(av, ""))
    if ignore_case:
        members |= {m.swapcase() for m in members}
    if negate:
        return "".join(c for c in _PRINTABLE if c not in members) or "x"
    return "".join(sorted(m for m in members if m.isprintable() or m in " \t")) or "x"


def _walk(tree: Any, rng: random.Random, flags: int, groups: dict[int, str]) -> str:
    return "".join(_node(op, av, rng, flags, groups) for op, av in tree)


def _node(op: Any, av: Any, rng: random.Random, flags: int, groups: dict[int, str]) -> str:
    """One node of the tree: a character, or what a compound node makes."""
    ignore_case = bool(flags & re.IGNORECASE)
    if op is C.LITERAL:
        ch = chr(av)
        return ch.swapcase() if ignore_case and rng.random() < 0.3 else ch
    if op is C.NOT_LITERAL:
        return rng.choice([c for c in _PRINTABLE if c != chr(av)])
    if op is C.ANY:  # now and then a space, which a word boundary after it may need
        return rng.choice(string.ascii_letters + string.digits + "    ")
    if op is C.IN:
        return rng.choice(_set_members(av, ignore_case))
    return _compound(op, av, rng, flags, groups)


def _compound(op: Any, av: Any, rng: random.Random, flags: int, groups: dict[int, str]) -> str:
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
        lo, hi, sub = av
        top = lo + _UNBOUNDED_EXTRA if hi is C.MAXREPEAT else hi
        return "".join(_walk(sub, rng, flags, groups) for _ in range(rng.randint(lo, top)))
    if op is C.BRANCH:
        return _walk(rng.choice(av[1]), rng, flags, groups)
    if op is C.SUBPATTERN:
        group, add, remove, sub = av
        text = _walk(sub, rng, (flags | add) & ~remove, groups)
        if group is not None:
            groups[group] = text
        return text
    if op is C.GROUPREF:
        return groups.get(av, "")
    if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
        return ""  # boundaries and lookarounds take no characters
    if op is C.ATOMIC_GROUP:
        return _walk(av, rng, flags, groups)
    raise ValueError(f"no example for {op}")


def example(
    pattern: str, seed: int, matches: Callable[[str], bool] | None = None, tries: int = 400
) -> str:
    """A string ``pattern`` matches (searched), drawn with ``seed``; ``matches`` judges a
    draw instead of Python's engine (RE2, for an expression Python backtracks on)."""
    if matches is None:
        compiled = re.compile(pattern)
        matches = lambda text: compiled.search(text) is not None  # noqa: E731
    parsed = P.parse(pattern)
    rng = random.Random(seed)
    for _ in range(tries):
        text = _walk(parsed, rng, parsed.state.flags, {})
        if matches(text):
            return text
    raise ValueError(f"no example found for {pattern!r}")
