"""Which forwarding headers the proxy believes, and the ones it sends.

``X-Forwarded-For``, ``-Host``, ``-Proto`` (and the rest of ``X-Forwarded-*``),
``Forwarded`` and ``X-Real-IP`` say who the client is and how it connected; any
client can write them. As uvicorn's ``--forwarded-allow-ips`` and Envoy's trusted
hops, the proxy believes them only from a peer in ``--trusted-proxies`` (a load
balancer in front of it): from such a peer the chain is extended (the peer appended
to ``X-Forwarded-For``, its ``-Proto`` and ``-Host`` kept); from any other, every
one of them is dropped and the proxy sets its own (``X-Forwarded-For`` the peer,
``-Proto`` and ``-Host`` as the proxy received the request). The upstream, the
shadow and the record all get the result.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from multidict import CIMultiDictProxy

__all__ = ["Forwarding", "TrustedProxies", "forwarding", "parse_trusted"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_EXACT = frozenset(
    {
        "forwarded",
        "x-real-ip",
        # What CDNs and other proxies name the client, and the URL overrides some
        # servers honour: claims only a trusted hop may make.
        "true-client-ip",
        "cf-connecting-ip",
        "fastly-client-ip",
        "x-client-ip",
        "x-cluster-client-ip",
        "proxy-client-ip",
        "wl-proxy-client-ip",
        "x-envoy-external-address",
        "x-original-forwarded-for",
        "x-original-url",
        "x-rewrite-url",
    }
)
_PREFIX = "x-forwarded-"


def is_forwarding(name: str) -> bool:
    """Whether a header (by its lower-case name) says who the client is. Underscores
    count as hyphens: CGI and WSGI servers read ``X_Forwarded_For`` as
    ``X-Forwarded-For`` (both are ``HTTP_X_FORWARDED_FOR``)."""
    name = name.replace("_", "-")
    return name.startswith(_PREFIX) or name in _EXACT


def parse_trusted(text: str, flag: str = "--trusted-proxies") -> tuple[Network, ...]:
    """Comma-separated addresses and CIDR blocks: ``10.0.0.0/8,127.0.0.1,::1``.

    >>> [str(n) for n in parse_trusted("10.0.0.0/8, 127.0.0.1")]
    ['10.0.0.0/8', '127.0.0.1/32']
    """
    networks = []
    for part in text.split(","):
        item = part.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(
                f"{flag}: {item[:64]!r} is not an IP address or CIDR block "
                "(e.g. 10.0.0.0/8,127.0.0.1)"
            ) from None
    if not networks:
        raise ValueError(f"{flag}: give at least one address or CIDR block")
    return tuple(networks)


class TrustedProxies:
    """Whether a peer address is a trusted proxy. Answers are cached (bounded: the
    addresses are peers'), since most traffic comes from a few load balancers."""

    __slots__ = ("_cache", "_networks")

    def __init__(self, networks: Iterable[Network]) -> None:
        self._networks = tuple(networks)
        self._cache: dict[str, bool] = {}

    def __contains__(self, peer: str | None) -> bool:
        if not self._networks or not peer:
            return False
        known = self._cache.get(peer)
        if known is not None:
            return known
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:  # a Unix socket's peer, or no address at all
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # a dual-stack listener's IPv4 peer
        trusted = any(address in network for network in self._networks)
        if len(self._cache) >= 4096:
            self._cache.clear()
        self._cache[peer] = trusted
        return trusted


@dataclass(frozen=True, slots=True)
class Forwarding:
    """What becomes of the forwarding headers: the client's to leave out (by lower-case
    name) and the proxy's to add."""

    drop: frozenset[str]
    add: list[tuple[str, str]]


_XFF, _XFP, _XFH = "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"
_OURS = frozenset({_XFF, _XFP, _XFH})


def forwarding(
    headers: CIMultiDictProxy[str],
    *,
    peer: str | None,
    trusted: bool,
    scheme: str,
    host: str | None,
) -> Forwarding:
    """The forwarding headers for a request from ``peer``, trusted or not."""
    if not trusted:
        drop = frozenset(k.lower() for k in headers if is_forwarding(k.lower()))
        add = [("X-Forwarded-For", peer)] if peer else []
        add.append(("X-Forwarded-Proto", scheme))
        if host:
            add.append(("X-Forwarded-Host", host))
        return Forwarding(drop | _OURS, add)
    # A trusted hop: its chain is extended, its Proto and Host are the client's.
    prior = ", ".join(v.strip() for v in headers.getall(_XFF, ()) if v.strip())
    add = []
    if peer:
        add.append(("X-Forwarded-For", f"{prior}, {peer}" if prior else peer))
    elif prior:
        add.append(("X-Forwarded-For", prior))
    if _XFP not in headers:
        add.append(("X-Forwarded-Proto", scheme))
    if host and _XFH not in headers:
        add.append(("X-Forwarded-Host", host))
    return Forwarding(frozenset({_XFF}), add)
