"""Quantised clocks: traces whose timestamps were logged at a coarse resolution.

Many public traces floor arrival times to a tick (1 s, 3 s): most gaps between
consecutive requests are 0 and each tick's requests share one timestamp. Replayed
as recorded, every tick is one instant burst the real service never saw. The plan
pass finds the tick on the start_ns column; the schedule then places each tick's
requests in the tick (``place_fraction``): by default each at a seeded random
point, as requests that arrive at random within the tick would be; or evenly
(``--tick-placement even``). Every shard draws the same, and the count per tick is
the recording's. A jittered clock's stamps belong
to their nearest grid point (``Ticks.grid``), so each tick spreads over the real
tick, not over the jitter.

The tick is found by ``traces/workload/clock.py`` (its rule is documented there), the
same rule the workload models use.
"""

from __future__ import annotations

import hashlib

from tailreplay.replayer.settings import PLACEMENTS
from tailreplay.traces.workload.clock import MIN_TICK_NS, TIE_SHARE, Ticks, detect_ticks

__all__ = [
    "MIN_TICK_NS",
    "PLACEMENTS",
    "TIE_SHARE",
    "Ticks",
    "detect_ticks",
    "place_fraction",
    "spread_fraction",
    "spread_line",
    "spread_tick",
    "tick_floor",
    "tick_phase",
]


def spread_tick(ticks: Ticks | None, wanted: bool | None) -> int | None:
    """The tick to spread requests over: ``wanted`` (--spread-ticks / --no-spread-ticks),
    or by default when the timestamps are quantised; None: send as recorded."""
    if ticks is None:
        return None
    if wanted if wanted is not None else ticks.quantised:
        return ticks.tick_ns
    return None


def _tick_text(tick_ns: int) -> str:
    if tick_ns >= 10**9:
        return f"{tick_ns / 1e9:.6g} s"
    return f"{tick_ns / 1e6:.3g} ms"


def _share_text(share: float) -> str:
    pct = share * 100
    return f"{pct:.0f}%" if pct >= 10 or pct == 0 else f"{pct:.1g}%"


def spread_line(ticks: Ticks | None, wanted: bool | None) -> str | None:
    """What the schedule says first about the clock (None: nothing worth saying)."""
    if ticks is None:
        if wanted:
            return (
                "warning: --spread-ticks: the timestamps share no tick of 1 ms or more; "
                "requests go out at their recorded times"
            )
        return None
    if wanted is None and not ticks.quantised:
        return None
    tick = _tick_text(ticks.tick_ns)
    ties = f"{_share_text(ticks.ties)} of gaps are 0"
    if ticks.jitter_ns:
        ties = f"jitter {_tick_text(ticks.jitter_ns)}, {ties}"
    head = (
        f"timestamps are quantised to {tick} ticks ({ties})"
        if ticks.quantised
        else f"timestamps fall on {tick} ticks ({ties})"
    )
    if spread_tick(ticks, wanted) is None:
        return f"{head}: each tick's requests go out together (--no-spread-ticks)"
    how = "--spread-ticks" if wanted else "--no-spread-ticks keeps the bursts"
    return f"{head}: spreading each tick's requests over the tick ({how})"


def tick_floor(start_ns: int, ticks: Ticks) -> int:
    """The start of the tick ``start_ns`` was logged in (``Ticks.grid``: a jittered
    clock's early stamp belongs to the next grid point)."""
    return ticks.grid(start_ns)


GOLDEN = (5**0.5 - 1) / 2
"""Steps of the golden ratio's fraction put n points on a circle no closer than
about 0.38/n of it and no further than about 1.8/n (the three-gap theorem), in
any number n: a tick's requests spread evenly without knowing how many come."""


def tick_phase(tick_ns: int, seed: bytes) -> float:
    """A tick's seeded phase in [0, 1): where its first request goes (``spread_fraction``)."""
    digest = hashlib.blake2b(
        b"\x00".join((tick_ns.to_bytes(8, "big", signed=True), seed, b"tick")), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big") / 2**64


def spread_fraction(phase: float, place: int) -> float:
    """Where in its tick the request at ``place`` (its tick's requests counted in
    archive order, every shard's and every copy) goes, in [0, 1): the tick's seeded
    phase (``tick_phase``), then golden-ratio steps. The clock hid the order and
    spacing within a tick; evenly spread, a tick of n requests sends none closer
    than 0.38/n of the tick to another (no two of a 3 s tick's 1,000 in one
    millisecond), where independent draws put two of a 3 s tick's 20 requests in one
    millisecond once every 16 ticks. Every shard and every run computes the same."""
    return (phase + place * GOLDEN) % 1.0


def place_fraction(
    placement: str, tick_start_ns: int, phase: float, seed: bytes, place: int
) -> float:
    """Where in the tick starting at ``tick_start_ns`` the request at ``place`` goes, in
    [0, 1) (``PLACEMENTS``; ``phase`` is the tick's ``tick_phase``)."""
    if placement == "even":
        return spread_fraction(phase, place)
    tick = tick_start_ns.to_bytes(8, "big", signed=True)
    parts = b"\x00".join((tick, seed, place.to_bytes(8, "big")))
    digest = hashlib.blake2b(parts, digest_size=8, person=b"tick-place").digest()
    return int.from_bytes(digest, "big") / 2**64
