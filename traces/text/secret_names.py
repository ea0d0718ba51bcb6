"""Which names hold credentials: one rule for header names, query and path parameters,
JSON members, form fields and the names in ``name: value`` text.

A name is split into words (on separators and camelCase, ``APIKey`` as ``api key``),
then normalised: trailing numbers and version markers go (``X-API-KEY-V2``,
``Api-Key-1``), as do a word's trailing digits (``apikey2``) and a last word that
only says "the value of" (``X-Token-Value``, ``secret_string``). The name holds a
credential when one of its words is a credential word (``auth``, ``password``,
``secret``, ``cookie``, ``session``, ``signature``, ``otp``… alone, plural or
ending a compound: ``oauth``, ``clientsecret``, ``phpsessid``, ``passwords``) or
when its *last* word is ``key`` or ``token`` (``x-goog-api-key``, ``apiKey``,
``access_token``, but not ``token_count`` or ``x-ratelimit-remaining-tokens``), or
is a list of keys (``apiKeys``, ``secret_keys``). A name whose last word says
something about a credential rather than holding it (``_ATTRIBUTES``:
``PASS_MAX_DAYS``, ``X-Session-Token-Ttl``, ``auth_type``, ``token_url``) holds
none, and a short allowlist stays readable (``READABLE``: rate-limit headers,
idempotency keys, a list's page tokens).
"""

from __future__ import annotations

import functools
import re

__all__ = ["READABLE", "URL_ONLY", "USER_FIELDS", "is_secret_name", "name_words"]

READABLE = re.compile(
    r"(?:x-|anthropic-)?ratelimit-[a-z0-9-]*|(?:x-)?idempotency-key|prompt-cache-key"
    r"|(?:next-)?page-token|next-token|continuation-token|sync-token"  # a list's cursor
)
"""Names (words joined by ``-``) that the rule would mask but that hold no secret."""

USER_FIELDS = frozenset({"user", "safety_identifier"})
"""JSON members naming the caller: fingerprinted like ``session`` (``fp:`` of ``user:`` + value)."""

URL_ONLY = frozenset({"code"})
"""Names that hold a credential only as a URL parameter: OAuth's authorization code
(RFC 6749 §4.1.2) is ``?code=``, where a JSON member ``code`` is a program or an
error code."""

_STRONG = re.compile(
    r"[a-z0-9]*(?:auth|authorization|authentication|password|passwd|passphrase|passcode"
    r"|secret|credential|cookie|signature|session|sessid|sessionid)s?"
    r"|(?:pwd|pw|pass|sig|sid|otp|totp|hotp|cred|pat)s?"  # whole words only: not `sacred`
)
_WEAK = re.compile(r"[a-z0-9]*(?:key|token)")  # a credential only as the name's last word
# Lists of keys (`apiKeys`, `secret_keys`) and of tokens (`refresh_tokens`), where
# a plural `tokens` after any other word is a count (`max_tokens`, `input_tokens`).
_KEY_OWNERS = frozenset({"api", "secret", "access", "private", "client", "signing", "ssh"})
_KEY_LISTS = frozenset(f"{owner}keys" for owner in _KEY_OWNERS)
_TOKEN_OWNERS = frozenset({"api", "access", "refresh", "bearer", "oauth", "csrf"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[^a-z0-9]+")
_VERSION = re.compile(r"v?\d+")
_ATTRIBUTES = frozenset(
    [
        *("ttl", "expiry", "expires", "expiration", "expire", "lifetime", "age", "timeout"),
        *("length", "len", "size", "min", "max", "days", "hours", "minutes", "seconds"),
        *("count", "type", "kind", "method", "mode", "policy", "hint", "prompt", "label"),
        *("field", "reset", "url", "uri", "endpoint", "path", "file", "dir", "header"),
        *("enabled", "required", "version", "format", "algorithm", "alg", "scheme"),
    ]
)
"""A last word that names something about a credential, not the credential
(``PASS_MAX_DAYS``, ``X-Session-Token-Ttl``, ``password_reset``, ``auth_type``,
``token_url``)."""
_VALUE_WORDS = frozenset({"value", "val", "string", "str", "data", "b64", "base64", "hex", "raw"})


def name_words(name: str) -> list[str]:
    """A name's words, normalised as the rule reads them.

    >>> name_words("X-API-KEY-V2"), name_words("apiKey2"), name_words("X-Token-Value")
    (['x', 'api', 'key'], ['api', 'key'], ['x', 'token'])
    """
    words = [w for w in _SEPARATORS.split(_CAMEL.sub("-", name).lower()) if w]
    while len(words) > 1 and _VERSION.fullmatch(words[-1]):
        words.pop()
    if len(words) > 1 and words[-1] in _VALUE_WORDS:  # before digits go: `base64`
        words.pop()
    if words:
        words[-1] = words[-1].rstrip("0123456789") or words[-1]
    if len(words) > 1 and words[-1] in _VALUE_WORDS:
        words.pop()
    return words


@functools.lru_cache(maxsize=4096)  # names repeat: every request sends the same headers
def is_secret_name(name: str, extra: frozenset[str] = frozenset(), *, url: bool = False) -> bool:
    """Whether a header, parameter or member of this name holds a credential; ``url``
    for a URL's query or path parameter (``URL_ONLY`` names too).

    >>> [is_secret_name(n) for n in ("X-Auth-Token", "apiKey", "max_tokens", "token_count")]
    [True, True, False, False]
    """
    if name.lower() in extra:
        return True
    words = name_words(name)
    if not words or READABLE.fullmatch("-".join(words)):
        return False
    if url and len(words) == 1 and words[0] in URL_ONLY:
        return True
    last = words[-1]
    owner = words[-2] if len(words) > 1 else ""
    if owner and last in _ATTRIBUTES:
        return False
    if last in _KEY_LISTS or (last == "keys" and owner in _KEY_OWNERS):
        return True
    if last == "tokens" and owner in _TOKEN_OWNERS:
        return True
    return _WEAK.fullmatch(last) is not None or any(_STRONG.fullmatch(w) for w in words)
