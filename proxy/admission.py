"""Admission at the connection cap: which client connection gives up its slot to a
newcomer, or whether the newcomer is refused.

Every client connection is in one state:

- **fresh**: accepted, never sent a byte. Where the system has TCP_DEFER_ACCEPT, a
  socket that sends nothing is accepted only after a delay, so one here has
  already been silent that long.
- **idle**: a keep-alive connection between requests.
- **head**: part of a request head has come, not the rest. A client sends its
  head in one go, so a head still coming is a slow sender (slowloris).
- **body**: its head came whole; its body is coming, at a pace (``BodyPace``).
- **busy**: its request came whole (its head, and its body if any): waiting for or
  receiving its answer. A busy connection is never pushed out.

A newcomer is judged by what waits unread in its socket (``proxy/receive_queue.py``):
nothing, part of a head, or a whole head. One with a whole head counts as busy from
the start: a burst of connections is admitted before any is read, and a request
that came whole must not lose its place to the connections accepted after it.

At the cap (all connections, or its peer's share: ``proxy/peers.py``) a newcomer
pushes out, first, the connection wasting its slot beyond doubt, the one that has
held it (or will still hold it) the longest without progress:

- a fresh connection (any age once the newcomer has sent bytes; over
  ``NEWCOMER_S`` for a silent newcomer);
- an idle one, idle over ``NEWCOMER_S``;
- a head still coming after ``HEAD_GRACE_S`` (for a newcomer that has sent bytes);
- a body that has been coming for ``SLOW_BODY_S`` or more, or at its pace so far
  needs that long to arrive, judged after ``BODY_GRACE_S`` (for a newcomer that
  has sent bytes, of a peer not reconnecting in a storm). An attacker can always
  send just above any floor, reconnect before any fixed age, or slow down as it
  goes so that what is left, at its pace so far, stays under any bound; it cannot
  do all three: what is left at the pace it comes tells a declared 5 MB at 40 KB/s
  from a prompt on a slow link while it is young, and its age tells it afterwards.

Else a newcomer whose head is whole pushes out the oldest head still coming, else
(when its peer is not in a storm) an idle connection however young: of the
longest idle, one of the peer holding the most connections (so that clients
keeping many connections barely idle cannot make a one-connection keep-alive
client's the one pushed out). Else
it gets a 503 and is closed, with what it sent read and dropped first, so that the
close is a FIN and the 503 reaches it; a silent newcomer is closed without one.

Before an idle or fresh connection is pushed out, its socket is checked: one whose
request has arrived unread is a head (or busy, when whole), not idle.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import time

from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from tailreplay.proxy.forwarding import TrustedProxies
from tailreplay.proxy.peers import PeerLimits, peer_cap, peer_of
from tailreplay.proxy.receive_queue import Waiting, discard, unread, waiting
from tailreplay.proxy.request_body import BodyPace

__all__ = [
    "BODY_GRACE_S",
    "HEAD_GRACE_S",
    "NEWCOMER_S",
    "SLOW_BODY_S",
    "ConnectionGuard",
    "Slot",
    "State",
]

NEWCOMER_S = 1.0
"""An idle connection younger than this is young: its client may be about to reuse it."""
HEAD_GRACE_S = 0.25
"""A head still coming after this long is a slow sender's (a client sends it in one go)."""
BODY_GRACE_S = 0.1
"""A body's pace is judged after this long (its first read may lag the head)."""
SLOW_BODY_S = 1.0
"""A body that has been coming this long, or needs this long to arrive at its pace so
far, wastes its slot (at the cap: a prompt on a LAN arrives in milliseconds)."""
LOOK_AHEAD = 8
"""Choices made for one newcomer, at most: a fresh or idle connection chosen that is
found with a request arrived unread is passed over, and the choice made again."""
BODY_SAMPLE = 64
"""Bodies judged in one choice: the longest-running ones (bounded work per newcomer)."""

_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%b"
)
_REFUSED_BODY = (
    b'{"error":{"message":"the proxy is at its connection limit","type":"overloaded_error",'
    b'"param":null,"code":null}}'
)


class State(enum.Enum):
    FRESH = "fresh"
    IDLE = "idle"
    HEAD = "head"
    BODY = "body"
    BUSY = "busy"
    GONE = "gone"


_LISTED = (State.FRESH, State.IDLE, State.HEAD, State.BODY)
"""The states a connection may be pushed out of, each kept in order of entry."""


class Slot:
    """One client connection as the guard sees it."""

    __slots__ = ("at", "fd", "pace", "peer", "state", "transport")

    def __init__(self, transport: asyncio.Transport, fd: int, peer: str, at: float) -> None:
        self.transport = transport
        self.fd = fd
        self.peer = peer
        self.state = State.FRESH
        self.at = at
        """When it entered its state."""
        self.pace: BodyPace | None = None


class Scope:
    """The connections of one scope (all of them, or one peer's) by state; each dict in
    the order its connections entered the state, so the first has been in it longest."""

    __slots__ = ("count", "listed")

    def __init__(self) -> None:
        self.count = 0
        self.listed: dict[State, dict[Slot, None]] = {s: {} for s in _LISTED}

    def first(self, state: State) -> Slot | None:
        return next(iter(self.listed[state]), None)


def _fd(transport: asyncio.BaseTransport) -> int:
    sock = transport.get_extra_info("socket")
    return -1 if sock is None else int(sock.fileno())


class ConnectionGuard:
    """Tracks client connections by state and enforces the caps: all told, and per peer."""

    def __init__(
        self, cap: int, per_peer: int | None = None, trusted: TrustedProxies | None = None
    ) -> None:
        self.cap = cap
        self._slots: dict[RequestHandler, Slot] = {}
        self._all = Scope()
        self._peers: dict[str, Scope] = {}
        self.peers = PeerLimits(peer_cap(cap, per_peer), trusted or TrustedProxies(()))
        self.evicted = 0
        """Fresh, idle and slow-head connections pushed out for a newcomer."""
        self.slow_bodies_evicted = 0
        self.refused = 0
        self.peer_refused = 0
        """Connections refused because their peer held its share already."""
        self.storms_refused = 0
        """Of ``refused``, those of a peer reconnecting in a storm (``proxy/peers.py``)."""
        self.body_timeouts = 0
        self.accept_errors = 0
        self.malformed = 0
        """Requests aiohttp's parser refused (answered 400 by it, never reaching the proxy)."""

    @property
    def open(self) -> int:
        return self._all.count

    def connected(self, handler: RequestHandler, transport: asyncio.Transport) -> Slot | None:
        """Admit a new connection, making room at the caps; None if refused."""
        peer = peer_of(transport)
        storming = self.peers.opened(peer, self._peers)
        fd = _fd(transport)
        own = self._peers.get(peer)
        newcomer: Waiting | None = None  # learnt only where a cap binds
        # A share as large as the cap is the cap's to enforce (and count).
        shared = self.peers.per_peer < self.cap
        if shared and own is not None and self.peers.full(peer, own.count):
            newcomer = waiting(fd)
            if not self._make_room(own, newcomer, storming):
                self.peer_refused += 1
                self._refuse(transport, fd, newcomer, peer)
                return None
        if self._all.count >= self.cap:
            newcomer = newcomer or waiting(fd)
            if not self._make_room(self._all, newcomer, storming):
                self.refused += 1
                self.storms_refused += storming
                self._refuse(transport, fd, newcomer, peer)
                return None
        slot = Slot(transport, fd, peer, time.monotonic())
        self._slots[handler] = slot
        self._add(slot)
        if newcomer is Waiting.HEAD:
            self._move(slot, State.BUSY)
        elif newcomer is Waiting.PART:
            self._move(slot, State.HEAD)
        return slot

    def lost(self, handler: RequestHandler) -> None:
        slot = self._slots.pop(handler, None)
        if slot is not None:
            self._forget(slot)

    def fed(self, slot: Slot, whole: bool) -> None:
        """Bytes of ``slot``'s connection reached the request parser; ``whole``: a head
        was completed by them."""
        state = slot.state
        if whole:
            if state is not State.BUSY:
                self._move(slot, State.BUSY)
        elif state is State.FRESH or state is State.IDLE:
            self._move(slot, State.HEAD)

    def busy(self, handler: RequestHandler) -> None:
        slot = self._slots.get(handler)
        if slot is not None:
            self._move(slot, State.BUSY)

    def body(
        self, handler: RequestHandler, length: int | None = None, stream: StreamReader | None = None
    ) -> BodyPace:
        """The pace of the body ``handler`` starts sending now (ended by ``idle``)."""
        pace = BodyPace(time.monotonic(), length, stream)
        slot = self._slots.get(handler)
        if slot is not None:
            slot.pace = pace
            self._move(slot, State.BODY)
        return pace

    def idle(self, handler: RequestHandler) -> None:
        """A response ended: the connection waits for its next request."""
        slot = self._slots.get(handler)
        if slot is not None:
            slot.pace = None
            self._move(slot, State.IDLE)
            self.peers.served(slot.peer)

    # -- bookkeeping --------------------------------------------------------

    def _scopes(self, slot: Slot) -> tuple[Scope, Scope]:
        return self._all, self._peers[slot.peer]

    def _add(self, slot: Slot) -> None:
        own = self._peers.get(slot.peer)
        if own is None:
            own = self._peers[slot.peer] = Scope()
        for scope in (self._all, own):
            scope.count += 1
            scope.listed[State.FRESH][slot] = None

    def _move(self, slot: Slot, state: State) -> None:
        before = slot.state
        if before is State.GONE:
            return
        for scope in self._scopes(slot):
            if before in scope.listed:
                del scope.listed[before][slot]
            if state in scope.listed:
                scope.listed[state][slot] = None
        slot.state = state
        slot.at = time.monotonic()

    def _forget(self, slot: Slot) -> None:
        if slot.state is State.GONE:
            return
        scopes = self._scopes(slot)
        for scope in scopes:
            scope.count -= 1
            scope.listed.get(slot.state, {}).pop(slot, None)
        if scopes[1].count == 0:
            del self._peers[slot.peer]
        slot.state = State.GONE

    # -- the choice at the cap -----------------------------------------------

    def _make_room(self, scope: Scope, newcomer: Waiting, storming: bool) -> bool:
        victim = self._victim(scope, newcomer, storming)
        if victim is None:
            return False
        if victim.state is State.BODY:
            self.slow_bodies_evicted += 1
        else:
            self.evicted += 1
        self._forget(victim)
        victim.transport.close()  # a response just written still flushes first
        return True

    def _victim(self, scope: Scope, newcomer: Waiting, storming: bool) -> Slot | None:
        """The connection ``newcomer`` pushes out of ``scope`` (module docstring). A
        fresh or idle one chosen is checked for a request arrived unread (a system
        call, so only once chosen); one found moves to head or busy, as the parser
        will soon see it, and the choice is made again."""
        for _ in range(LOOK_AHEAD):
            victim = self._choose(scope, newcomer, storming)
            if victim is None or victim.state is State.HEAD or victim.state is State.BODY:
                return victim
            found = waiting(victim.fd)
            if found is Waiting.NOTHING:
                return victim
            self._move(victim, State.BUSY if found is Waiting.HEAD else State.HEAD)
        return None

    def _choose(self, scope: Scope, newcomer: Waiting, storming: bool) -> Slot | None:
        now = time.monotonic()
        sent = newcomer is not Waiting.NOTHING
        fresh = scope.first(State.FRESH)
        idle = scope.first(State.IDLE)
        head = scope.first(State.HEAD)
        wasting: list[tuple[float, Slot]] = []
        if fresh is not None and (sent or now - fresh.at >= NEWCOMER_S):
            wasting.append((now - fresh.at, fresh))
        if idle is not None and now - idle.at >= NEWCOMER_S:
            wasting.append((now - idle.at, idle))
        if head is not None and sent and now - head.at >= HEAD_GRACE_S:
            wasting.append((now - head.at, head))
        if sent and not storming:
            wasting.extend(self._slowest_body(scope, now))
        if wasting:
            return max(wasting, key=lambda item: item[0])[1]
        if newcomer is Waiting.HEAD:
            if head is not None:
                return head
            if idle is not None and not storming:
                return self._idle_of_busiest_peer(scope)
        return None

    def _idle_of_busiest_peer(self, scope: Scope) -> Slot | None:
        """Of the ``LOOK_AHEAD`` connections idle the longest, one of the peer holding
        the most connections (the longest idle of its): a client keeping many
        connections busy cannot make a one-connection client's the one pushed out."""
        candidates = list(itertools.islice(scope.listed[State.IDLE], LOOK_AHEAD))
        if not candidates:
            return None
        return max(candidates, key=lambda slot: self._peers[slot.peer].count)

    def _slowest_body(self, scope: Scope, now: float) -> list[tuple[float, Slot]]:
        """The body wasting its slot the most (``BodyPace.wasted``), if ``SLOW_BODY_S``
        or more, among the ``BODY_SAMPLE`` running longest; as (seconds, slot), or
        nothing."""
        worst: Slot | None = None
        worst_s = SLOW_BODY_S
        whole: list[Slot] = []
        for slot in itertools.islice(scope.listed[State.BODY], BODY_SAMPLE):
            pace = slot.pace
            assert pace is not None
            if pace.done:
                whole.append(slot)
                continue
            if now - pace.started < BODY_GRACE_S:
                break  # listed in order of start: the rest are younger still
            wasted = pace.wasted(now)
            if wasted >= worst_s:
                worst, worst_s = slot, wasted
        for slot in whole:
            self._move(slot, State.BUSY)
        if worst is None or worst.pace is None:
            return []
        wasted = worst.pace.wasted(now, unread(worst.fd))
        return [(wasted, worst)] if wasted >= SLOW_BODY_S else []

    def _refuse(self, transport: asyncio.Transport, fd: int, newcomer: Waiting, peer: str) -> None:
        """A 503 for a newcomer that has sent bytes; a silent one is closed without
        (the accept was deferred until it had been silent for --idle-timeout, which
        would close it the same way, and a write to a socket costs more than the rest
        of a refusal: what matters in a flood of them). A refusal is the cap's doing,
        not the peer's: the token its connection took is given back, so that a client
        refused while others hold every slot is not then taken for a storm."""
        self.peers.served(peer)
        if newcomer is not Waiting.NOTHING:
            transport.write(_REFUSED % (len(_REFUSED_BODY), _REFUSED_BODY))
            discard(fd)
        transport.close()
