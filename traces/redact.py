"""Deterministic masking of credentials and personal data in what is recorded.

One set of rules for everything that writes an archive: the proxy (headers,
query strings, ``--bodies redacted``) and the importers of captures that carry
headers (HAR). Secret headers become keyed fingerprints; each match in text
becomes ``[KIND:fingerprint]``: the same value always gives the same mask (so
repeated prompts still look repeated) and the fingerprint is keyed, so masks
cannot be reversed by guessing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, urlencode

__all__ = ["SECRET_HEADERS", "fingerprint", "redact_headers", "redact_path", "redact_text"]

SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)


def fingerprint(key: bytes, value: str | bytes) -> str:
    """A keyed, one-way stand-in for a secret: equal secrets give equal fingerprints."""
    data = value.encode() if isinstance(value, str) else value
    return "fp:" + hmac.new(key, data, hashlib.sha256).hexdigest()[:16]


# Order matters: keys and tokens before the looser number patterns.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("BEARER", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")),
    ("KEY", re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}\b")),  # OpenAI-style keys
    ("KEY", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),  # AWS access key ids
    ("KEY", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),  # GitHub tokens
    ("KEY", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b")),  # JWTs
    ("EMAIL", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")),
    ("CARD", re.compile(r"\b(?:\d[ -]?){12,18}\d\b")),
    ("PHONE", re.compile(r"(?<!\w)\+?\d{1,3}?[ .-]?\(?\d{2,4}\)?[ .-]?\d{3,4}[ .-]?\d{3,4}(?!\w)")),
)

_SECRET_PARAMS = re.compile(r"(?i)(key|token|secret|sig|signature|password|passwd|auth)")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def redact_text(text: str, key: bytes) -> str:
    """``text`` with emails, phone and card numbers, keys and bearer tokens masked.

    >>> redact_text("mail bob@example.com", b"k")
    'mail [EMAIL:fp:…]'
    """
    for kind, pattern in _PATTERNS:

        def mask(m: re.Match[str], kind: str = kind) -> str:
            value = m.group(0)
            if kind == "CARD" and not _luhn_ok(re.sub(r"\D", "", value)):
                return value  # a long number that is not a card number: keep it
            return f"[{kind}:{fingerprint(key, value)}]"

        text = pattern.sub(mask, text)
    return text


def redact_path(path: str, key: bytes) -> str:
    """``path`` with the values of secret-looking query parameters fingerprinted."""
    base, sep, query = path.partition("?")
    if not sep:
        return path
    pairs = parse_qsl(query, keep_blank_values=True)
    cleaned = [(k, fingerprint(key, v) if _SECRET_PARAMS.search(k) else v) for k, v in pairs]
    return base + "?" + urlencode(cleaned, quote_via=quote, safe=":/")


def redact_headers(
    headers: Iterable[tuple[str, str]], extra: frozenset[str], key: bytes
) -> list[tuple[str, str]]:
    """Headers as recorded: secrets (and ``extra`` names) replaced by fingerprints."""
    secret = SECRET_HEADERS | extra
    return [(k.lower(), fingerprint(key, v) if k.lower() in secret else v) for k, v in headers]
