"""The event loop a run's coroutine runs on: asyncio's own, or uvloop on request.

uvloop (libuv underneath, ``pip install uvloop``) does the loop's own work in C. On
the benchmark machine (2 shared cores) that did not make a replay faster: the
client's CPU per request was 128 µs on uvloop against 130 µs on asyncio, and the
dispatch lag differed less between the loops than between runs
(docs/benchmarks.md), so asyncio's loop is the default. uvloop's ``loop.time()``
counts whole milliseconds: code that measures below a millisecond reads
``time.monotonic()`` itself (``replayer/dispatch.py``).

>>> run(main(), "auto")  # uvloop when importable, else asyncio's loop
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tailreplay.errors import UsageError

__all__ = ["EVENT_LOOPS", "loop_factory", "resolve", "run"]

EVENT_LOOPS = ("asyncio", "uvloop", "auto")
"""``auto``: uvloop when it can be imported, else asyncio's own loop."""

T = TypeVar("T")


def resolve(loop: str = "asyncio") -> str:
    """The loop ``loop`` names on this machine: ``uvloop`` or ``asyncio``. Asking for
    uvloop where it cannot be imported is a usage error (exit 2), one line."""
    if loop not in EVENT_LOOPS:
        raise ValueError(f"event loop {loop!r}: one of {', '.join(EVENT_LOOPS)}")
    if loop == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if loop == "auto":
            return "asyncio"
        raise UsageError(
            "--event-loop uvloop: uvloop cannot be imported here (pip install uvloop; it "
            "does not run on Windows); --event-loop asyncio runs on asyncio's own loop"
        ) from None
    return "uvloop"


def loop_factory(loop: str = "asyncio") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What ``asyncio.Runner(loop_factory=...)`` takes for ``loop``; None: asyncio's own."""
    if resolve(loop) == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


def run(coro: Coroutine[Any, Any, T], loop: str = "asyncio") -> T:
    """``asyncio.run(coro)`` on the loop ``loop`` names (``EVENT_LOOPS``)."""
    try:
        factory = loop_factory(loop)
    except BaseException:
        coro.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)
