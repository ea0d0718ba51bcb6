"""The options of what ``replay`` knows of its target before the run: ``--sim-profile``,
``--sim-arg``, ``--tail-cost`` and ``--max-context`` (``studies/targets.py`` turns them
into the pieces the replay takes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from tailreplay.cli.options import TAIL_COST
from tailreplay.sim.profiles import DEFAULT_PROFILE, PROFILES

__all__ = ["target_options"]

F = TypeVar("F", bound=Callable[..., object])

_OPTIONS = [
    click.option(
        "--sim-profile",
        type=click.Choice(sorted(PROFILES)),
        default=DEFAULT_PROFILE,
        show_default=True,
        help="Profile of the built-in simulator when there is no --target (as `tailreplay "
        "sim --profile`; fast: an H100-class deployment, which traces like the shipped peak "
        "need). Its context and KV cache are sized to the trace's longest request.",
    ),
    click.option(
        "--sim-arg",
        "sim_args",
        multiple=True,
        help="An argument for the built-in simulator (repeatable; as `tailreplay sim` takes "
        "it), e.g. --sim-arg=--max-model-len=200000; wins over the sizing.",
    ),
    click.option(
        "--tail-cost",
        type=TAIL_COST,
        help="input=MS,output=MS: the cost per token that ranks the tail when the archive "
        "records no latencies [default: the simulator profile's prefill and decode step].",
    ),
    click.option(
        "--max-context",
        type=click.IntRange(min=1),
        help="The target's context in tokens: a tail budget is cut so input + output fits.",
    ),
]


def target_options(f: F) -> F:
    """``--sim-profile``, ``--sim-arg``, ``--tail-cost`` and ``--max-context``."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f
