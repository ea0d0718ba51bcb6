"""Quantised clocks: traces whose timestamps were logged at a coarse resolution.

Many public traces floor arrival times to a tick (1 s, 3 s): most gaps between
consecutive requests are 0 and each tick's requests share one timestamp. Replayed
as recorded, every tick is one instant burst the real service never saw. The plan
pass finds the tick on the start_ns column; the schedule then spreads each tick's
requests over the tick by a seeded draw per record, so shards agree and the count
per tick is the recording's.

The tick is found by ``traces/workload/clock.py`` (its rule is documented there), the
same rule the workload models use.
"""

from __future__ import annotations

import hashlib

from tailreplay.traces.workload.clock import MIN_TICK_NS, TIE_SHARE, Ticks, detect_ticks

__all__ = [
    "MIN_TICK_NS",
    "TIE_SHARE",
    "Ticks",
    "detect_ticks",
    "spread_fraction",
    "spread_line",
    "spread_tick",
    "tick_floor",
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
        return f"{tick_ns / 1e9:g} s"
    return f"{tick_ns / 1e6:g} ms"


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
    ties = _share_text(ticks.ties)
    head = (
        f"timestamps are quantised to {tick} ticks ({ties} of gaps are 0)"
        if ticks.quantised
        else f"timestamps fall on {tick} ticks ({ties} of gaps are 0)"
    )
    if spread_tick(ticks, wanted) is None:
        return f"{head}: each tick's requests go out together (--no-spread-ticks)"
    how = "--spread-ticks" if wanted else "--no-spread-ticks keeps the bursts"
    return f"{head}: spreading each tick's requests over the tick ({how})"


def tick_floor(start_ns: int, ticks: Ticks) -> int:
    """The start of the tick ``start_ns`` falls in."""
    return start_ns - (start_ns - ticks.origin_ns) % ticks.tick_ns


def spread_fraction(key: bytes, seed: bytes, copy: int) -> float:
    """Where in its tick copy ``copy`` of a record goes, in [0, 1): a draw from the
    record's key and the seed alone, so every shard and every run computes the same."""
    digest = hashlib.blake2b(
        b"\x00".join((key, seed, b"tick", copy.to_bytes(4, "big"))), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big") / 2**64
