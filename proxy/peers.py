"""Client connections per peer (the client's IP address): how many one peer holds,
and how fast it opens them.

Without a per-peer bound, one address holding every slot of ``--max-connections``
(each sending a body just fast enough to stay above the minimum pace) locks every
other client out; with it, one peer holds at most ``per_peer`` connections. A peer
that reconnects in a storm may push nobody out at the cap but long-idle and silent
connections (``proxy/admission.py``). A storm is told by a token bucket: each
connection takes a token, ``STORM_RATE`` come back a second up to ``STORM_BURST``,
and each response a connection of the peer ends, or a refusal at the cap (the
cap's doing, not the peer's), returns one. A client without keep-alive opens a
connection a request and gets a response on each, so it never storms however
fast it goes; a storm's connections are admitted and then pushed out unanswered.
Peers in ``--trusted-proxies`` (load balancers: their connections carry many
clients) are held to neither.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Container

from tailreplay.proxy.forwarding import TrustedProxies

__all__ = ["MAX_TRACKED", "STORM_BURST", "STORM_RATE", "PeerLimits", "peer_cap", "peer_of"]

STORM_BURST = 16.0
"""Connections a peer may open at once before it is taken for a reconnect storm..."""
STORM_RATE = 8.0
"""...and a second after that, besides one for each response its connections got."""
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
    """The share each peer may hold, and each peer's connect pace."""

    def __init__(self, per_peer: int, trusted: TrustedProxies) -> None:
        self.per_peer = per_peer
        self.trusted = trusted
        self._pace: dict[str, tuple[float, float]] = {}
        """peer -> (tokens left of its burst, when counted)."""

    def opened(self, peer: str, holding: Container[str] = ()) -> bool:
        """Count a connection ``peer`` opened; whether it is storming (out of tokens).
        ``holding``: the peers with connections open, whose pace is kept when
        ``MAX_TRACKED`` is reached."""
        if peer in self.trusted:
            return False
        now = time.monotonic()
        tokens, at = self._pace.get(peer, (STORM_BURST, now))
        tokens = min(STORM_BURST, tokens + (now - at) * STORM_RATE) - 1
        if peer not in self._pace and len(self._pace) >= MAX_TRACKED:
            self._pace = {p: v for p, v in self._pace.items() if p in holding}
        self._pace[peer] = (tokens, now)
        return tokens < 0

    def served(self, peer: str) -> None:
        """A connection of ``peer`` got a response: one token back."""
        entry = self._pace.get(peer)
        if entry is not None:
            self._pace[peer] = (min(STORM_BURST, entry[0] + 1), entry[1])

    def full(self, peer: str, holding: int) -> bool:
        """Whether ``peer``, holding ``holding`` connections, is at its share."""
        return holding >= self.per_peer and peer not in self.trusted
