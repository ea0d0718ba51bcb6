"""Whether two URLs reach one server: the guard that keeps a replay off production
and a proxy's shadow off its own upstream and listener.

Host names are not compared as text: ``localhost``, ``127.1``, ``0x7f000001``,
``[::ffff:127.0.0.1]`` and this machine's own name all reach the same server as
``127.0.0.1``. Each side is resolved to its addresses; every loopback address,
the unspecified ones (``0.0.0.0``, ``::``: a server bound there answers on every
address) and every address this machine owns (one it can bind a socket to) count
as one host, "this machine"; an IPv4-mapped IPv6 address is its IPv4 address. Two
URLs are one deployment when a pair of their addresses match on the same port (the
scheme's default where none is given).
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import socket
from collections.abc import Iterable

from yarl import URL

__all__ = ["same_deployment"]

RESOLVE_TIMEOUT_S = 5.0
"""A name that does not resolve in this long is compared by its text alone."""
_THIS_MACHINE = "this machine"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def same_deployment(target: str, upstreams: Iterable[str]) -> str | None:
    """The first of ``upstreams`` that ``target`` reaches as well, else None."""
    mine = _endpoint(target)
    if mine is None:
        return None
    for upstream in upstreams:
        theirs = _endpoint(upstream)
        if theirs is not None and mine[1] == theirs[1] and mine[0] & theirs[0]:
            return upstream
    return None


def _endpoint(url: str) -> tuple[frozenset[str], int] | None:
    """The host's addresses (as compared) and the port; None for a URL without a host."""
    try:
        u = URL(url)
        port = u.port or _DEFAULT_PORTS.get(u.scheme, 0)
    except (ValueError, TypeError):
        return None
    if not u.host:
        return None
    return _addresses(u.host), port


def _addresses(host: str) -> frozenset[str]:
    """What ``host`` reaches: its addresses, each as ``_canonical`` puts it, or its name
    (lower case, without a trailing dot) when it does not resolve."""
    name = host.strip("[]").rstrip(".").lower()
    literal = _ip(name)
    if literal is not None:
        return frozenset({_canonical(literal)})
    found = _resolve(name)
    if not found:
        return frozenset({name})
    return frozenset(_canonical(a) for a in found)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _resolve(name: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Addresses of ``name`` (the C library's reading: ``127.1`` and ``0x7f000001`` are
    127.0.0.1), within ``RESOLVE_TIMEOUT_S``; none when it fails."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        infos = pool.submit(socket.getaddrinfo, name, None).result(RESOLVE_TIMEOUT_S)
    except (OSError, UnicodeError, concurrent.futures.TimeoutError):
        return []
    finally:
        pool.shutdown(wait=False)
    out = []
    for info in infos:
        ip = _ip(str(info[4][0]).split("%")[0])
        if ip is not None:
            out.append(ip)
    return out


def _canonical(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """One name for every address of this machine; an IPv4-mapped address as IPv4."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_unspecified or _bindable(ip):
        return _THIS_MACHINE
    return str(ip)


def _bindable(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether this machine owns ``ip``: a socket can be bound to it (port 0, never
    listened on)."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((str(ip), 0))
        return True
    except OSError:
        return False
