"""Client connections per peer (the client's IP address): how many one peer holds,
and how fast it opens them.

Without a per-peer bound, one address holding every slot of ``--max-connections``
(each sending a body just fast enough to stay above the minimum pace) locks every
other client out; with it, one peer holds at most ``per_peer`` connections, and a
peer that reconnects in a storm (faster than ``STORM_RATE`` a second, past a burst
of ``STORM_BURST``) may not push anyone else out at the cap. Peers in
``--trusted-proxies`` (load balancers: their connections carry many clients) are
held to neither.
"""

from __future__ import annotations

import asyncio
import time

from tailreplay.proxy.forwarding import TrustedProxies

__all__ = ["MAX_TRACKED", "STORM_BURST", "STORM_RATE", "PeerLimits", "peer_cap", "peer_of"]

STORM_BURST = 16.0
"""Connections a peer may open at once before it is taken for a reconnect storm..."""
STORM_RATE = 8.0
"""...and a second after that: a client with a pool opens connections once and keeps
them, one without keep-alive opens one a request; a storm opens hundreds."""
MAX_TRACKED = 65536
"""Peers whose connect pace is remembered; past it, peers with no connection open are
forgotten (their pace is then a fresh burst): memory bounded whatever the source."""


def peer_cap(cap: int, requested: int | None) -> int:
    """Connections one peer may hold: ``requested``, or a quarter of the cap, at least
    8 (or the whole cap when it is under 8)."""
    if requested is not None:
        return min(requested, cap)
    return max(cap // 4, min(8, cap))


def peer_of(transport: asyncio.BaseTransport) -> str:
    """The peer's address as the key of its counts ("" when it has none: a Unix socket)."""
    name = transport.get_extra_info("peername")
    if isinstance(name, tuple) and name:
        return str(name[0])
    return ""


class PeerLimits:
    """Open connections and connect pace per peer."""

    def __init__(self, per_peer: int, trusted: TrustedProxies) -> None:
        self.per_peer = per_peer
        self.trusted = trusted
        self.open: dict[str, int] = {}
        self._pace: dict[str, tuple[float, float]] = {}
        """peer -> (tokens left of its burst, when counted)."""

    def opened(self, peer: str) -> bool:
        """Count a connection ``peer`` opened; whether it is storming (reconnecting
        faster than ``STORM_RATE`` past its burst)."""
        if peer in self.trusted:
            return False
        now = time.monotonic()
        tokens, at = self._pace.get(peer, (STORM_BURST, now))
        tokens = min(STORM_BURST, tokens + (now - at) * STORM_RATE) - 1
        if peer not in self._pace and len(self._pace) >= MAX_TRACKED:
            self._forget_idle()
        self._pace[peer] = (tokens, now)
        return tokens < 0

    def full(self, peer: str) -> bool:
        """Whether ``peer`` holds its ``per_peer`` connections already."""
        return self.open.get(peer, 0) >= self.per_peer and peer not in self.trusted

    def add(self, peer: str) -> None:
        self.open[peer] = self.open.get(peer, 0) + 1

    def remove(self, peer: str) -> None:
        left = self.open.get(peer, 0) - 1
        if left > 0:
            self.open[peer] = left
        else:
            self.open.pop(peer, None)

    def _forget_idle(self) -> None:
        self._pace = {p: v for p, v in self._pace.items() if p in self.open}
