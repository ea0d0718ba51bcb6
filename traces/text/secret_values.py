"""Whether a value that text assigns to a credential's name is a credential.

A name says what a value would hold (``secret_names.py``); text then says whether it
does. Two kinds of names ask different things of their value:

- **Chosen secrets**: a name with ``password``, ``passwd``, ``passphrase``,
  ``passcode``, ``pwd``, ``pw``, ``pass``, ``secret``, ``credential`` or ``cred`` in
  it, a key or token an API's by its name (``api_key``, ``OPENAI_API_KEY``,
  ``access_token``), or an HTTP header's name (``curl -H 'X-Auth-Token: …'``, as
  the header itself is masked). People choose these, or paste them as they were
  given, so any word can be one (``password: dragon``, ``OPENAI_API_KEY=abc123``).
- **Made secrets**: every other credential's name (``key``, ``token``, ``auth``,
  ``cookie``, ``session``, ``sid``, ``signature``, ``otp``, ``pat``…). Machines make
  these, so a value is one only when it looks made (``looks_made``): a run of 6
  characters or more mixing letters and digits, 16 digits or more, a word mixing
  three of small and capital letters, digits and symbols, letters changing case as
  no word does (``GQHiUkjkaPdFtHs``), or 16 letters with few vowels. ``key =
  'PYTHONCASEOK'``, ``key0 = 305419896``, ``AuthenticationInstant="2002-04-18T16:56:53Z"``,
  ``auth_header = 'Authorization'``, ``token=EOF`` and ``Set-Cookie: fig=newton``
  hold none. Nor does a value with brackets, braces or a backslash: a pattern or
  code (``_HEX_PAT = "[0-9A-Fa-f]{1,4}"``), which no token holds.

A value after an authorization scheme (``Bearer …``, ``Token …``; after ``key``,
``token`` or ``bot`` in small letters, words too, only what looks made) is a
credential under either kind of name. Neither kind takes as one:

- a value that opens on a word of a sentence (``password: The password for the
  authentication``), or words after a word, unquoted, that look made by no machine
  (``credential: disallow Carriage Returns``; ``password: 'correct horse'`` is
  quoted);
- a placeholder (``your-api-key-here``, ``<token>``, ``****``, ``foo``, ``password
  password`` in a ``.netrc`` example) or a number of at most three digits (a count,
  a flag);
- a path (``PWD=/home/bob``), or a remark in brackets (``Public-Key: (2048 bit)``);
- the name again, as a Makefile's rule, a locale table or a sentence writes it
  (``git-credential-osxkeychain: git-credential-osxkeychain.o``, ``'sid_et':
  'sid_ET.UTF-8'``, ``password = 'Password used to generate key'``).
"""

from __future__ import annotations

import itertools
import re

from tailreplay.traces.text.secret_names import name_words

__all__ = [
    "PLACEHOLDERS",
    "SCHEME_WORDS",
    "changes_case_randomly",
    "is_header_name",
    "is_secret_value",
    "looks_made",
]

PLACEHOLDERS = frozenset(
    [
        *("pass", "password", "passwd", "pwd", "secret", "changeme"),
        *("xxx", "xxxx", "xyz", "123", "foo", "bar", "baz", "qux"),
    ]
)
"""Values documentation writes in a credential's place."""

_CHOSEN = re.compile(
    r"[a-z0-9]*(?:password|passwd|passphrase|passcode|secret|credential)s?|(?:pwd|pw|pass|creds?)"
)
# Runs of the alphabets made credentials are written in (base64 and its URL form, hex).
_RUN = re.compile(r"[A-Za-z0-9+/%]{6,}={0,2}")
_OWNERS = frozenset(["api", "access", "secret", "private", "client", "signing", "ssh", "auth"])
_OWNERS |= frozenset(["bearer", "oauth", "refresh", "csrf", "session", "app", "master"])
"""Words before ``key`` or ``token`` that say it is an API's credential (``api_key``,
``OPENAI_API_KEY``, ``access_token``): any value, as a password's name takes."""
_HEADER_NAME = re.compile(r"(?:[Xx]-[\w-]+|[A-Z][A-Za-z0-9]*(?:-[A-Z][A-Za-z0-9]*)+)")
"""An HTTP header's name (``Ocp-Apim-Subscription-Key``, ``X-Auth-Token``): a header
line quoted in text (``curl -H '…: value'``) is taken as the header is, any value."""
_API_CREDENTIALS = frozenset(["key", "keys", "token", "tokens"])
SCHEME_WORDS = r"(?i:bearer|basic|token|bot|ssws|key|apikey|digest)"
"""The authorization schemes a credential follows in a header's value or in text."""
_SCHEME = re.compile(SCHEME_WORDS)
_WORD_SCHEMES = frozenset(["key", "token", "bot"])
_PLACEHOLDER = re.compile(
    r"(?i)^(?:your|my)[-_ ]|[-_ ]here$|^<[^<>]*>$|^x{4,}$|^\*{3,}$|^\.{3,}$|placeholder"
    r"|changeme|replace[-_]?me|^dummy|redacted"
)
"""What documentation and examples write in a credential's place."""
_SHORT_NUMBER = re.compile(r"-?\d{1,3}")
_SENTENCE_OPENERS = frozenset(
    [
        "the",
        "a",
        "an",
        "your",
        "my",
        "our",
        "their",
        "his",
        "her",
        "its",
        "this",
        "that",
        "to",
        "for",
        "of",
        "in",
        "is",
        "are",
        "was",
        "be",
        "will",
        "must",
        "should",
        "can",
        "see",
        "if",
        "when",
        "not",
    ]
)
_WORD = re.compile(r"[^\s,;&<>()\[\]{}\"'=:\\]{8,}")
_NUMBERED = re.compile(r"[A-Za-z]+[0-9]{1,2}")
"""A word numbered (``cookie2``, ``python3``, ``key1``): no run a machine made."""
_CAPITALS_INSIDE = re.compile(r"[a-z][A-Z].*[A-Z][a-z]")
"""Two capitals inside a word that mixes them half and half: ``rczsEIHVtxH``."""
_LONE_SMALL = re.compile(r"[A-Z][a-z][A-Z]")
_PATH = re.compile(r"(?:~|\.{1,2})?/[\w.-]*(?:/[\w.-]*)*|[A-Za-z]:\\[\w .\\-]*")


def changes_case_randomly(word: str) -> bool:
    """Letters that change from lower to upper case more often than a camelCase name
    does, with a lone small letter between capitals, which a name's words never are
    (``GQHiUkjkaPdFtHs``, not ``getKeyValueFromStore`` or ``xmlSecKeysMngrGetKey``)."""
    humps = sum(1 for a, b in itertools.pairwise(word) if a.islower() and b.isupper())
    return humps > 3 and humps > len(word) / 5 and _LONE_SMALL.search(word) is not None


def looks_made(value: str) -> bool:
    """Whether ``value`` holds what a machine made (or a password generator): a run of
    6 letters and digits or more mixing both (not a word numbered: ``cookie2``), of
    16 digits or more, or of 16 letters with few vowels; a word of 8 characters or
    more mixing three of small and capital letters, digits and symbols
    (``rrkzaV$Kn!yCe6V$o``); or letters as much capitals as small ones in places no
    name puts them (``rczsEIHVtxH``, not ``getKeyValueFromStore``).

    >>> [looks_made(v) for v in ("GQHiUkjkad2y4oGnScGPtHs", "PYTHONCASEOK", "305419896")]
    [True, False, False]
    """
    for run in _RUN.findall(value):
        letters = any(c.isalpha() for c in run)
        if letters and any(c.isdigit() for c in run) and not _NUMBERED.fullmatch(run):
            return True
        if not letters and sum(c.isdigit() for c in run) >= 16:
            return True
        if letters and _few_vowels(run):
            return True
    return any(_mixed(word) for word in _WORD.findall(value))


def _few_vowels(run: str) -> bool:
    """16 letters or more with under a quarter vowels: drawn at random (a fifth of the
    alphabet), not words (``PYTHONCASEOK``, ``getKeyValueFromStore``: a third)."""
    letters = [c for c in run.lower() if c.isalpha()]
    return len(letters) >= 16 and sum(c in "aeiou" for c in letters) * 4 < len(letters)


def _mixed(word: str) -> bool:
    """A word of ``looks_made``'s: three kinds of characters, or capitals at random."""
    small = sum(c.islower() for c in word)
    capitals = sum(c.isupper() for c in word)
    digits = sum(c.isdigit() for c in word)
    inside = word[1:-1]  # `$Version` is a variable's name
    symbols = len(inside) - sum(c.isalnum() or c in "-_./" for c in inside)
    if sum(n > 0 for n in (small, capitals, digits, symbols)) >= 3:
        return True
    if capitals * 10 <= (small + capitals) * 3:
        return False
    return changes_case_randomly(word) or _CAPITALS_INSIDE.search(word) is not None


def is_secret_value(name: str, value: str, *, quoted: bool = False) -> bool:
    """Whether ``value``, assigned in text to ``name`` (a credential's name), is a
    credential (module docstring).

    >>> is_secret_value("password", "dragon"), is_secret_value("key", "PYTHONCASEOK")
    (True, False)
    """
    bare = value.strip().strip("\"'").strip()
    if not bare or bare.lower() in PLACEHOLDERS or _PATH.fullmatch(bare):
        return False
    if _PLACEHOLDER.search(bare) or _SHORT_NUMBER.fullmatch(bare):
        return False  # `your-api-key-here`, `<token>`, `****`; a count or a flag: `17`
    if bare[0] == "(":
        return False  # a remark, `Public-Key: (2048 bit)`; code's would be an expression
    if _names_itself(name.strip("\"'").lower(), bare.lower()):
        return False  # `hide_cookie2 = hide_cookie2`, `'sid_et': 'sid_ET.UTF-8'`
    first, _, rest = bare.partition(" ")
    rest = rest.strip()
    if rest and _SCHEME.fullmatch(first):
        # `Bearer abc`: a credential by what precedes it; `key`, `token` and `bot` in
        # small letters are words too (`key if …`), so what follows must look made.
        if first in _WORD_SCHEMES:  # capitalised, a header's scheme: `Key fk_…`
            return looks_made(rest)
        return any(c.isalnum() for c in rest) and not _PLACEHOLDER.search(rest)
    if first.lower() in _SENTENCE_OPENERS:
        return False
    if rest and not quoted and not looks_made(rest):
        # Words after words, unquoted: a sentence (`credential: disallow Carriage Returns`).
        return False
    words = name_words(name)
    if any(_CHOSEN.fullmatch(w) for w in words) or is_header_name(name):
        return True
    if words and words[-1] in _API_CREDENTIALS and _OWNERS.intersection(words[:-1]):
        return True
    if any(c in bare for c in "[]{}\\"):
        return False  # a pattern or code (`_HEX_PAT = "[0-9A-Fa-f]{1,4}"`): no token holds one
    return looks_made(bare)


def is_header_name(name: str) -> bool:
    """An HTTP header's name (``_HEADER_NAME``): its line in text is a header's, not code."""
    return _HEADER_NAME.fullmatch(name) is not None


def _names_itself(name: str, value: str) -> bool:
    """Whether ``value`` opens on its name again (or the name's last member, or the
    name without its file extension), then ends or goes on past a word's end."""
    stem, dot, last = name.rpartition(".")
    owns = [name, *((stem, last) if dot else ())]
    return any(
        len(own) >= 3 and value.startswith(own) and not value[len(own) : len(own) + 1].isalnum()
        for own in owns
    )
