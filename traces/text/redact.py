"""Deterministic masking of credentials and personal data, by rule.

One family of functions for everything that stores or shows what a client sent:
the proxy's archive (headers, path and query, ``--bodies redacted``), the
content that ``--otlp-capture-content`` puts on spans, URLs in log lines, and
the importers of captures that carry headers (HAR).

The rules (docs/proxy.md, "Redaction"):

- A *name* (header, query or path parameter, JSON member, form field) is a
  credential's by the rule in ``tailreplay.traces.text.secret_names``: words
  normalised (case, separators, camelCase, trailing digits and version
  suffixes), one credential word in them or ``key``/``token`` last.
- A *value* is a credential when it has a known key shape (``_CREDENTIAL_KINDS``:
  vendors' token formats, JWTs, PEM private keys, a URL's password), is a
  ``Bearer``/``Basic`` credential, or is assigned in text to a name the name rule
  masks (``name=value``, ``name: Scheme value``, ``--name value``), or paired
  with one in a two-item list or tuple (``mask_pairs``).
- Text in bodies is also cleared of emails, card numbers (Luhn-checked) and
  phone numbers; JSON string escapes are decoded before matching. Bodies and span
  content are walked by ``redact_bodies``.

Every match becomes a keyed fingerprint (``fp:`` + 16 hex of an HMAC-SHA256),
in text as ``[KIND:fp:…]``: the same value always gives the same mask (repeated
prompts still look repeated) and masks cannot be reversed by guessing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable

import re2

from tailreplay.traces.text.code_values import is_expression, is_plain_literal
from tailreplay.traces.text.credential_hints import HINT, SHAPE_HINT
from tailreplay.traces.text.encoded_text import mask_encoded
from tailreplay.traces.text.pattern_set import Kind, PatternSet, for_re2
from tailreplay.traces.text.provider_keys import provider_keys
from tailreplay.traces.text.secret_names import is_secret_name
from tailreplay.traces.text.secret_values import (
    PLACEHOLDERS,
    SCHEME_WORDS,
    is_header_name,
    is_secret_value,
    looks_made,
)

__all__ = ["fingerprint", "has_credential", "is_secret_name", "mask_pairs", "redact_text"]


def fingerprint(key: bytes, value: str | bytes) -> str:
    """A keyed, one-way stand-in for a secret: equal secrets give equal fingerprints."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    return "fp:" + hmac.new(key, data, hashlib.sha256).hexdigest()[:16]


# Patterns for text. Each starts with one literal character or character class, so
# that the regex engine rejects a position with one comparison per pattern (a leading
# ``\b`` or group would make it try every pattern in full at every character); the
# word boundary is checked just after that first character, by ``_B``, and after a
# key by ``_E``: of ASCII word characters only, so a key glued to text in another
# script (`密钥是sk_live_…`) starts and ends where its ASCII does.
_B = r"(?<![A-Za-z0-9_].)"
_E = r"(?![A-Za-z0-9_])"
# A value is read 256 characters at most: a name the rule keeps has its value searched
# again as text, and an unbounded value there would read the rest of the text once per
# assignment in it (`a:b@a:b@…`, quadratic). A credential's value is masked to the end
# of its run (``_VALUE_REST``).
_VALUE = r"[^\s\"'&;,<>\\]{1,256}"
# An authorization scheme (`Token`, `Bot`, `SSWS`…) and its credential are one value.
_SCHEME = (
    rf"(?:{SCHEME_WORDS}[ \t]+(?=[A-Za-z0-9._~+/=])"
    r"|[A-Za-z][A-Za-z0-9-]{0,15}[ \t]+(?=[A-Za-z0-9._~+/=][A-Za-z0-9._~+/=-]{7}))?"
)
# A mask already made is not masked again; a PEM block is masked whole, as a key.
# A value in quotes runs to its closing quote (spaces and escapes included).
_QUOTED = r"(?<=\")(?:[^\"\\\r\n]|\\.)+|(?<=')[^'\r\n]+"
# A list or an object opens (`"keys": ["…"]`): its members are judged as they come,
# not its bracket as the value.
_NOT_OPEN = r"(?![\[{][\s\"'\[{])"
_MASKED = r"(?!\[?[A-Z]*:?fp:[0-9a-f]{16}|-----BEGIN)"


def _assign(named: bool) -> str:
    """Any name assigned a value in text (`name=value`, `"name": "value"`, `Name: Scheme
    value`): masked when ``is_secret_name(name)``, the rule names are masked by in
    headers, parameters and JSON; else its value is redacted as text of its own. With
    ``named``, the three parts are the groups ``aname``, ``asep`` and ``aval``."""
    n, s, v = ("?P<aname>", "?P<asep>", "?P<aval>") if named else ("?:", "?:", "?:")
    # `:=` and `=>` (PHP's and Ruby's pairs) assign; `::` (a scope,
    # `apt::key::gpgcommand`) and `==` do not.
    sep = r"(?::=|=>|[:=](?![:=]))"
    return (
        rf"({n}[A-Za-z_-](?<![\w.-].)(?=[\w.-]*+[\"']?[ \t]*[:=])[A-Za-z0-9_.-]*+)"
        rf"({s}[\"']?[ \t]*{sep}[ \t]*[\"']?){_MASKED}({v}{_QUOTED}|{_NOT_OPEN}{_SCHEME}{_VALUE})"
    )


# A Cookie or Set-Cookie line in text: every pair on it, as the header is masked whole
# (from a first character that is no space or quote: `'Cookie': 'http.cookies'` is code).
_COOKIE = r"[CcSs](?<!\w.)(?i:ookie|et-cookie)[\"']?[ \t]*:[ \t]*(?=[^\s\"'])[^\r\n\"']+"
_COOKIE_NAME = re.compile(r"(?i)(?:set-)?cookie[\"']?[ \t]*:[ \t]*")


# A PEM private key, armour to armour (or to the end of its base64, cut short).
_PEM = (
    r"-(?<!\w.)----BEGIN (?P<pem>[A-Z0-9 ]*)PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[\s\S]*?-----END (?P=pem)PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,-]*)"
)


def _flag(named: bool) -> str:
    """A command line's long option and its value (`--password X`): masked when
    ``is_secret_name`` says so of the option's name."""
    n, s, v = ("?P<fname>", "?P<fsep>", "?P<fval>") if named else ("?:", "?:", "?:")
    # A quoted value runs to its closing quote: `--password 'correct horse'`.
    value = r"(?<=[\"'])[^\"'\r\n]+|(?<![\"'])[^\s\"'-]\S*"
    return rf"({n}-(?<![\w-].)-[A-Za-z][\w-]{{0,40}})({s}[ \t]+[\"']?){_MASKED}({v}{value})"


def _mysql(named: bool) -> str:
    """The MySQL clients' password option, glued to its value: `mysql -u root -pX`."""
    c, v = ("?P<mcmd>", "?P<mval>") if named else ("?:", "?:")
    # The options before -p: at most 200 characters, so a line of many `mysql`
    # words costs a bounded scan each.
    command = r"m(?<!\w.)ysql(?:dump|admin|import|show)?\b[^\n]{0,200}?[ \t]-p"
    return rf"({c}{command}){_MASKED}({v}[^\s\"']+)"


def _curl(named: bool) -> str:
    """curl's user option with a password (`curl -u user:pass`, `--user=user:pass`);
    the user alone (curl then asks for the password) is no credential."""
    c, v = ("?P<ccmd>", "?P<cval>") if named else ("?:", "?:")
    command = r"c(?<!\w.)url\b[^\n]{0,200}?[ \t](?:-u|--user)(?:[ \t]+|=)?[\"']?"
    return rf"({c}{command}){_MASKED}({v}[^\s\"':]*:[^\s\"']+)"


# A URL's password (`postgres://user:…@db`), in any value. Found from the `//` on:
# before it, `scheme:` reads as a name assigned a value, and that value is searched.
_USERINFO = r"//(?P<uuser>[^\s/?#@:\"'<>]*):(?P<upass>[^\s/?#@\"'<>]+)@"
_DIGITS = tuple("0123456789")
_WORDS_JOINED = r"[a-z]{1,12}[0-9]{0,5}(?:[-_][a-z]{1,12}[0-9]{0,5})*(?![\w-])"
_CREDENTIAL_KINDS: tuple[Kind, ...] = (
    ("BEARER", rf"[Bb]{_B}(?i:earer)\s+[A-Za-z0-9._~+/=-]{{8,}}", ("bearer",)),
    ("BASIC", rf"[Bb]{_B}(?i:asic)\s+[A-Za-z0-9+/]{{8,}}={{0,2}}", ("basic",)),
    ("COOKIE", _COOKIE, ("ookie",)),
    ("USERINFO", _USERINFO, ("@",)),
    ("SECRET", _assign(named=False), (":", "=")),
    # OpenAI, Anthropic, Stripe: not short lower-case words (each maybe numbered) joined,
    # as a file's or an algorithm's name is (`pk-spawn-polkit-agent.c`,
    # `sk_predefined_gamma.h`, `sk-ecdsa-sha2-nistp256@openssh.com`).
    ("KEY", rf"[spr]{_B}k[-_](?!{_WORDS_JOINED})[A-Za-z0-9_-]{{16,}}", ("k-", "k_")),
    ("KEY", rf"A{_B}(?:KIA|SIA)[0-9A-Z]{{16}}{_E}", ("AKIA", "ASIA")),  # AWS access key ids
    (
        "KEY",
        rf"g{_B}(?:h[pousr]_[A-Za-z0-9]{{30,}}{_E}|ithub_pat_[A-Za-z0-9_]{{22,}})",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),  # GitHub
    ("KEY", rf"g{_B}lpat-[A-Za-z0-9_-]{{20,}}", ("glpat-",)),  # GitLab
    ("KEY", rf"x{_B}ox[abprs]-[A-Za-z0-9-]{{10,}}", ("xox",)),  # Slack
    ("KEY", rf"h{_B}f_[A-Za-z0-9]{{30,}}{_E}", ("hf_",)),  # Hugging Face
    ("KEY", rf"A{_B}Iza[0-9A-Za-z_-]{{35}}", ("AIza",)),  # Google
    (
        "KEY",
        rf"e{_B}yJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}{_E}",
        ("eyJ",),
    ),  # JWTs
    # Vendors' formats after detect-secrets' plugins (sendgrid, twilio, mailchimp,
    # telegram_token, square_oauth, discord, pypi_token), rewritten to open on a literal
    # character as the others do; npm's from its documented `npm_` prefix.
    ("KEY", rf"n{_B}pm_[A-Za-z0-9]{{36}}{_E}", ("npm_",)),  # npm
    ("KEY", rf"p{_B}ypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{{50,}}", ("pypi-",)),  # PyPI
    ("KEY", rf"S{_B}G\.[A-Za-z0-9_-]{{22}}\.[A-Za-z0-9_-]{{43}}", ("SG.",)),  # SendGrid
    # Twilio account SIDs and API keys
    ("KEY", rf"[AS]{_B}[CK][0-9a-f]{{32}}{_E}", ("AC", "AK", "SC", "SK")),
    ("KEY", rf"[0-9a-f]{_B}[0-9a-f]{{31}}-us\d{{1,2}}{_E}", ("-us",)),  # Mailchimp
    ("KEY", rf"\d{_B}\d{{7,9}}:AA[0-9A-Za-z_-]{{33}}(?![\w-])", (":AA",)),  # Telegram bots
    ("KEY", rf"b{_B}ot\d{{8,10}}:AA[0-9A-Za-z_-]{{33}}(?![\w-])", (":AA",)),  # in a Bot API path
    ("KEY", rf"s{_B}q0(?:atp|csp)-[0-9A-Za-z_-]{{22,43}}", ("sq0",)),  # Square
    (
        "KEY",
        rf"[MNO]{_B}[A-Za-z0-9_-]{{23,25}}\.[A-Za-z0-9_-]{{6}}\.[A-Za-z0-9_-]{{27,38}}",
        (".",),
    ),  # Discord
    ("KEY", _PEM, ("-----BEGIN",)),
    ("FLAG", _flag(named=False), ("--",)),
    ("MYSQL", _mysql(named=False), ("mysql",)),
    ("CURL", _curl(named=False), ("curl",)),
)
_LOCAL = "[A-Za-z0-9._%+-]"  # an email address's local part
_EMAIL: Kind = (
    "EMAIL",
    rf"{_LOCAL}(?<!{_LOCAL}.){_LOCAL}*+@[A-Za-z0-9.-]+\.[A-Za-z]{{2,}}\b",
    ("@",),
)
_PHONE_REST = r"[ .-]?\(?\d{2,4}\)?[ .-]?\d{3,4}[ .-]?\d{3,4}(?!\w)"
_PII_KINDS: tuple[Kind, ...] = (
    ("CARD", rf"\d{_B}(?:[ -]?\d){{12,18}}\b", _DIGITS),  # 13 to 19 digits
    ("PHONE", rf"\+{_B}\d{{1,3}}?{_PHONE_REST}", _DIGITS),
    ("PHONE", rf"\d{_B}\d{{0,2}}?{_PHONE_REST}", _DIGITS),
)
_TEXT = PatternSet((*_CREDENTIAL_KINDS, _EMAIL, *_PII_KINDS), default="SECRET")
# Paths and headers: numeric ids stay readable.
_TARGET = PatternSet((*_CREDENTIAL_KINDS, _EMAIL), default="SECRET")
_ASSIGN_RE = re.compile(_assign(named=True))
# A key's shape where an assignment's name starts (`bot123456789:AA…`, `sk-…: x`):
# the key is what is there.
_KEY_AT = re.compile("|".join(p for kind, p, _ in _CREDENTIAL_KINDS if kind == "KEY"))
_USERINFO_RE = re.compile(_USERINFO)
_VALUE_REST = re.compile(r"(?<![\"'])[^\s\"'&;,<>\\]*")
"""What follows a value read to ``_VALUE``'s bound (nothing after a closing quote)."""
_AMPERSAND_RUN = re.compile(r"(?:&(?![\w.\[\]-]*=)[^\s\"'&;,<>\\]+)+")
_FLAG_RE = re.compile(_flag(named=True))
_MYSQL_RE = re.compile(_mysql(named=True))
_CURL_RE = re.compile(_curl(named=True))


_PHONE_SEPARATORS = re.compile(r"[ .()-]+")
_CARD_ISSUER = re.compile(r"4\d{15}|5[1-5]\d{14}|3[47]\d{13}|6(?:011|5\d\d)\d{12}")
"""Visa, Mastercard, American Express and Discover numbers, unseparated."""


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _is_basic(value: str) -> bool:
    """``Basic <base64 of user:password>``; not the words "basic understanding"."""
    encoded = value.split()[-1]
    try:
        return b":" in base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False


def _kept(kind: str, value: str) -> bool:
    """A match that is not what its pattern is after, left as it is."""
    if kind == "CARD":
        digits = re.sub(r"\D", "", value)
        # Unseparated, only a known card's length and issuer: ids and counts are long
        # numbers too, and one in ten passes the Luhn check.
        bare = digits == value and not _CARD_ISSUER.fullmatch(digits)
        return bare or not _luhn_ok(digits)
    if kind == "PHONE":
        # One without a country code is taken only with two separators (555 123 4567,
        # (555) 123-4567): a bare or decimal number (737.035533) is any number.
        separators = _PHONE_SEPARATORS.findall(value)
        dotted = set(separators) == {"."}  # an address or a version: 192.168.100.200
        return not value.startswith("+") and (len(separators) < 2 or dotted)
    if kind in ("SECRET", "FLAG"):
        a = (_ASSIGN_RE if kind == "SECRET" else _FLAG_RE).fullmatch(value)
        if a is not None:
            found = _KEY_AT.match(value) or has_credential(a[1]) or has_credential(a[3])
            return not (_assigned_credential(a, value, 0, len(value)) or found)
    if kind == "USERINFO" and (u := _USERINFO_RE.match(value)) is not None:
        # `https://user:pass@host`, `https://a:b@host`; no user and a colon after it
        # is CVS's `:pserver:user@host`, a method and a user.
        password = u["upass"]
        cvs = not u["uuser"] and ":" in password
        return cvs or len(password) < 3 or password.lower() in PLACEHOLDERS
    if kind == "COOKIE" and (c := _COOKIE_NAME.match(value)) is not None:
        return not looks_made(value[c.end() :])  # `Set-Cookie: fig=newton`, `cookie: %s`
    if kind == "CURL" and (q := _CURL_RE.fullmatch(value)) is not None:
        return q["cval"].rpartition(":")[2].lower() in PLACEHOLDERS  # `curl -u name:password`
    return kind == "BASIC" and not _is_basic(value)


def _assigned_credential(a: re.Match[str], text: str, start: int, end: int) -> bool:
    """Whether the assignment ``a`` (name, separator, value; found at ``start:end`` of
    ``text``) gives a credential's name a credential: not code (a header's line is
    none), not a value of no credential's look (``secret_values.py``)."""
    name, sep, value = a[1], a[2], a[3]
    return (
        is_secret_name(name)
        and is_secret_value(name, value, quoted=sep[-1:] in ("'", '"'))
        and not is_expression(value, text, start, end, sep, header=is_header_name(name))
    )


# Name/value pairs written as a two-item list or tuple in text: code or JSON quoted in
# a prompt (``headers = [("Authorization", "…")]``, ``[["X-Api-Token", "…"]]``). The
# value is a credential's when the name is (``secret_names.py``), as it would be
# under that name in a header or a JSON member.

_PAIR = re.compile(
    r"""[\[(]\s*(["'])(?P<name>[\w.-]{1,64})\1\s*,\s*(["'])(?P<value>(?:(?!\3)[^\\\r\n]|\\.){1,512})\3\s*[\])]"""
)

_SPACE = r"[\s\pZ\x0b\x1c-\x1f\x{85}]*"  # what Python's \s takes
_PAIR_GATE = re2.compile(rf"""[\[(]{_SPACE}["'][^"'\r\n]{{1,64}}["']{_SPACE},""")
"""Where a pair can open, searched by RE2 first (``_PAIR``'s back-references are
Python's alone): a tenth of the time Python's engine takes to try ``_PAIR`` at
every bracket of prose and code."""


def mask_pairs(text: str, masked: Callable[[str], str]) -> str:
    """``text`` with the value of each pair naming a credential replaced by
    ``masked(value)`` (its quotes and brackets kept)."""
    if "," not in text or ("(" not in text and "[" not in text):
        return text
    if _PAIR_GATE.search(for_re2(text)) is None:
        return text

    def one(m: re.Match[str]) -> str:
        name, value = m["name"], m["value"]
        if not is_secret_name(name) or is_plain_literal(value):
            return m[0]  # `('SIG_DFL', 'SIG_IGN')`: a constant is no credential
        if not is_secret_value(name, value, quoted=True):
            return m[0]
        start, end = m.start("value") - m.start(), m.end("value") - m.start()
        return m[0][:start] + masked(m["value"]) + m[0][end:]

    return _PAIR.sub(one, text)


def redact_text(text: str, key: bytes) -> str:
    """``text`` with credentials, emails, phone and card numbers masked: inside encoded
    runs (``encoded_text.py``), in providers' formats (``provider_keys.py``, matched on
    the text as it came), then by the rules here.

    >>> redact_text("mail bob@example.com, password=hunter2", b"k")
    'mail [EMAIL:fp:…], password=[SECRET:fp:…]'
    """
    text = mask_encoded(text, has_credential, lambda run: f"[SECRET:{fingerprint(key, run)}]")
    text = mask_pairs(text, lambda value: f"[SECRET:{fingerprint(key, value)}]")
    masked = provider_keys().mask(text, lambda kind, v: f"[{kind}:{fingerprint(key, v)}]")
    return _by_rule(masked, key)


def _by_rule(text: str, key: bytes) -> str:
    mask = _TEXT.for_text(text)
    pattern = _TEXT.pattern(mask)
    out: list[str] = []
    pos = 0
    while (m := pattern.search(text, pos)) is not None:
        value = m.group(0)
        kind = _TEXT.kind(value, mask)
        out.append(text[pos : m.start()])
        if kind == "SECRET" and (k := _KEY_AT.match(text, m.start())) is not None:
            out.append(f"[KEY:{fingerprint(key, k[0])}]")
            pos = k.end()
            continue
        a = None
        if kind in ("SECRET", "FLAG"):
            a = (_ASSIGN_RE if kind == "SECRET" else _FLAG_RE).fullmatch(value)
        if a is not None and not _assigned_credential(a, text, m.start(), m.end()):
            # A name of no credential, or one given code (`key = next(it)`), is searched
            # as text (a key's shape before a colon), and the search goes on from its
            # value, which may hold a key or an assignment (`OpenAI(api_key='…')`).
            name = _by_rule(a[1], key) if has_credential(a[1]) else a[1]
            out.append(name + a[2])
            pos = m.start() + a.start(3)
            continue
        if a is not None:  # a credential's name: its value masked
            name = _by_rule(a[1], key) if kind == "SECRET" else a[1]  # a key can be a name
            # The value to the end of its run, then on past `&` unless a parameter
            # follows (`&user=`): `password=Tr0ub4dor&WC5IdXYpEH` is one password.
            rest = _VALUE_REST.match(text, m.end()) if kind == "SECRET" else None
            end = rest.end() if rest else m.end()
            more = _AMPERSAND_RUN.match(text, end)
            value = text[m.start() + a.start(3) : more.end() if more else end]
            out.append(f"{name}{a[2]}[SECRET:{fingerprint(key, value)}]")
            pos = more.end() if more else end
            continue
        else:
            out.append(_masked(kind, value, key))
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def _masked(kind: str, value: str, key: bytes) -> str:
    """One match of the text patterns as it is recorded (assignments are masked by
    ``redact_text`` itself, which has their parts at hand)."""
    if _kept(kind, value):
        return value
    if kind == "USERINFO" and (u := _USERINFO_RE.match(value)) is not None:
        user = _by_rule(u["uuser"], key)  # a token can be the user: https://ghp_…:x@
        return f"//{user}:[SECRET:{fingerprint(key, u['upass'])}]@"
    if kind == "COOKIE" and (c := _COOKIE_NAME.match(value)) is not None:
        return f"{c[0]}[SECRET:{fingerprint(key, value[c.end() :])}]"
    if kind == "MYSQL" and (q := _MYSQL_RE.fullmatch(value)) is not None:
        return _by_rule(q["mcmd"], key) + f"[SECRET:{fingerprint(key, q['mval'])}]"
    if kind == "CURL" and (q := _CURL_RE.fullmatch(value)) is not None:
        return _by_rule(q["ccmd"], key) + f"[SECRET:{fingerprint(key, q['cval'])}]"
    return f"[{kind}:{fingerprint(key, value)}]"


def _by_rule_found(text: str) -> bool:
    """Whether ``text`` holds what _TARGET matches."""
    low = text.lower()
    if HINT.search(low) is None and SHAPE_HINT.search(low) is None:
        return False
    mask = _TARGET.for_text(text)
    matches = _TARGET.pattern(mask).finditer(text)
    return any(not _kept(_TARGET.kind(m[0], mask), m[0]) for m in matches)


def has_credential(text: str) -> bool:
    """Whether ``text`` holds a credential or an email: by the rules here, or in a
    provider's format."""
    return _by_rule_found(text) or bool(provider_keys().find(text))
