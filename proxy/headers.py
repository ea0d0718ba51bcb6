"""Which headers cross the proxy.

Hop-by-hop headers (RFC 9110 §7.6.1) describe one connection, not the message:
they are never forwarded. Kept as a frozenset and tested member by member, since a
missing comma in a tuple of strings silently glues two names together.
"""

from __future__ import annotations

from multidict import CIMultiDictProxy

from tailreplay.proxy.forwarding import Forwarding

__all__ = [
    "HOP_BY_HOP",
    "request_headers_recorded",
    "request_headers_upstream",
    "response_headers_downstream",
]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

# Never forwarded upstream: the client's view of the proxy, not of the upstream.
# Expect: the proxy answers 100-continue itself, and sends the body upstream whole.
_REQUEST_DROP = frozenset({"host", "content-length", "traceparent", "tracestate", "expect"})


def _connection_listed(values: tuple[str, ...]) -> set[str]:
    # "Connection: close, X-Foo" makes X-Foo hop-by-hop too.
    listed: set[str] = set()
    for value in values:
        listed.update(v.strip().lower() for v in value.split(",") if v.strip())
    return listed


_DROP_CACHE: dict[tuple[frozenset[str], tuple[str, ...]], frozenset[str]] = {}


def _dropped(base: frozenset[str], values: tuple[str, ...]) -> frozenset[str]:
    """``base`` plus the names the Connection header (``values``) lists.

    Nearly every message says "Connection: keep-alive" or nothing, so the answer is
    cached by the header's values (a bounded cache: the values come from peers).
    """
    if not values:
        return base
    key = (base, values)
    drop = _DROP_CACHE.get(key)
    if drop is None:
        drop = base | _connection_listed(values)
        if len(_DROP_CACHE) < 256:
            _DROP_CACHE[key] = drop
    return drop


_REQUEST_NEVER = HOP_BY_HOP | _REQUEST_DROP


def request_headers_upstream(
    headers: CIMultiDictProxy[str], forwarded: Forwarding
) -> list[tuple[str, str]]:
    """The headers to send upstream: hop-by-hop and Host dropped, the forwarding
    headers as the trust model has them (``proxy/forwarding.py``).

    A list, not a CIMultiDict: the upstream client writes it out as it is.
    """
    drop = _dropped(_REQUEST_NEVER, tuple(headers.getall("connection", ())))
    gone = forwarded.drop
    out = [(k, v) for k, v in headers.items() if (n := k.lower()) not in drop and n not in gone]
    out += forwarded.add
    return out


def request_headers_recorded(
    headers: CIMultiDictProxy[str], forwarded: Forwarding
) -> list[tuple[str, str]]:
    """The request's headers as the record keeps them: as the client sent them, but for
    the forwarding headers, which are what went upstream (the client's address the
    proxy believes)."""
    gone = forwarded.drop
    return [(k, v) for k, v in headers.items() if k.lower() not in gone] + forwarded.add


_WITH_LENGTH = HOP_BY_HOP
_WITHOUT_LENGTH = HOP_BY_HOP | frozenset({"content-length"})


def response_headers_downstream(
    headers: list[tuple[str, str]], *, keep_length: bool
) -> list[tuple[str, str]]:
    """The upstream's response headers for the client, minus hop-by-hop ones."""
    connection = tuple(v for k, v in headers if k.lower() == "connection")
    drop = _dropped(_WITH_LENGTH if keep_length else _WITHOUT_LENGTH, connection)
    return [(k, v) for k, v in headers if k.lower() not in drop]
