"""The seam to the built-in target: what ``replay`` without ``--target`` starts.

The replayer does not import the simulator (a package beside it); the command line
hands in an object with this shape (``sim.launcher.BuiltinSim``), and the run starts
it once the plan knows the longest request, so the target can be sized to hold it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Protocol

from tailreplay.replayer.schedule import Plan

__all__ = ["BuiltinTarget", "builtin_started"]


class BuiltinTarget(Protocol):
    """The target to start for a run without one, sized for the plan's longest request
    (``Plan.longest``, tokens)."""

    def start(self, longest: int | None) -> AbstractContextManager[str]:
        """Start it; the context manager yields its base URL."""
        ...

    def describe(self, longest: int | None) -> str:
        """What was started, for the line that names it."""
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
