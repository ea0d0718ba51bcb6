"""The seam to the built-in target: what ``replay`` without ``--target`` starts.

The replayer does not import the simulator (a package beside it); the command line
hands in an object with this shape (``sim.launcher.BuiltinSim``), and the run starts
it once the plan knows the longest request, so the target can be sized to hold it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from tailreplay.replayer.schedule import Plan

__all__ = ["Answer", "Ask", "BuiltinTarget", "builtin_started"]

Ask = tuple[float, int, int | None, list[int], int]
"""A request served offline: its due time (s from the start), prompt tokens, output
tokens (None: the profile draws them; 0: a call that generates nothing, answered at
once), its recorded prefix hashes (each a 512-token block it shares), and a number its
own blocks are salted with."""
Answer = tuple[int, list[float], int | None, str]
"""What it got: status (200, 429, 400), each token's time from its due time (none for
a call that generates nothing), the prompt tokens found cached, and a refusal's text."""


class BuiltinTarget(Protocol):
    """The target to start for a run without one, sized for the plan's longest request
    (``Plan.longest``, tokens)."""

    def start(self, longest: int | None) -> AbstractContextManager[str]:
        """Start it; the context manager yields its base URL."""
        ...

    def describe(self, longest: int | None) -> str:
        """What was started, for the line that names it."""
        ...

    def serve_offline(
        self,
        longest: int | None,
        asks: Iterator[tuple[Any, Ask]],
        emit: Callable[[list[tuple[Any, Answer]]], None],
        stop: threading.Event,
    ) -> None:
        """Serve ``asks`` (in due order, each with a key handed back) by the engine in
        this thread on a virtual clock, answers in batches through ``emit`` as they
        finish; until all are served or ``stop`` is set (``replay --offline``)."""
        ...


@contextlib.contextmanager
def builtin_started(
    builtin: BuiltinTarget, the_plan: Plan, say: Callable[[str], None]
) -> Iterator[str]:
    """The built-in target, started and sized for ``the_plan``; one line says where and how."""
    with builtin.start(the_plan.longest) as url:
        say(
            f"no --target: replaying against the built-in simulator at {url} "
            f"({builtin.describe(the_plan.longest)})"
        )
        yield url
