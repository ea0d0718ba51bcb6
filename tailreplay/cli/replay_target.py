"""What ``replay`` knows of its target before the run: the built-in simulator, the cost
that ranks the tail, the context a stretched request must fit.

``--sim-profile``, ``--sim-arg``, ``--tail-cost`` and ``--max-context`` (one option
set), and ``target_model``, which turns them into the pieces the replay takes.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import click

from tailreplay.cli.options import TAIL_COST
from tailreplay.errors import UsageError
from tailreplay.sim.profiles import DEFAULT_PROFILE, PROFILES

if TYPE_CHECKING:
    from tailreplay.replayer.schedule import TailCost
    from tailreplay.sim.launcher import BuiltinSim

__all__ = ["TargetModel", "fresh_simulators", "target_model", "target_options"]

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


@dataclass(frozen=True)
class TargetModel:
    builtin: BuiltinSim | None
    """The built-in simulator; None with --target."""
    tail_cost: TailCost
    max_context: int | None
    """The context a tail budget must fit, when known."""


def target_model(
    target: object | None,
    sim_profile: str,
    seed: int,
    sim_args: tuple[str, ...],
    tail_cost: tuple[float, float] | None,
    max_context: int | None,
) -> TargetModel:
    """The options as the replay takes them. The tail's cost is --tail-cost, else the
    simulator profile's (without --target: the one that runs; with it: the default):
    prefill per prompt token, one decode step per output token. The context is
    --max-context, or the simulator's where --sim-arg pins it (else the simulator is
    sized to fit every request, stretched)."""
    from tailreplay.cli.sim import builtin_sim
    from tailreplay.replayer.schedule import TailCost
    from tailreplay.sim.profiles import profile

    if target is not None and sim_args:
        raise UsageError("--sim-arg sets up the built-in simulator, which --target replaces")
    builtin = None if target is not None else builtin_sim(sim_profile, seed, sim_args)
    model = builtin.sized(None) if builtin is not None else profile(DEFAULT_PROFILE)
    cost = TailCost(model.prefill_per_token_ms, model.decode_ms(1))
    if tail_cost is not None:
        cost = TailCost(*tail_cost)
    pinned = dict(builtin.overrides) if builtin is not None else {}
    limits = [max_context, pinned.get("max_model_len"), pinned.get("kv_tokens")]
    known = [n for n in limits if n is not None]
    return TargetModel(builtin, cost, min(known) if known else None)


_TIMED_PARAMS = ("prefill_base_ms", "prefill_per_token_ms", "decode_base_ms", "decode_per_seq_ms")


def fresh_simulators(
    profile_name: str, speed: float, sim_args: tuple[str, ...]
) -> Callable[[int], AbstractContextManager[str]]:
    """Fresh built-in simulators, one per replay (``validate-model``'s arms, ``capacity``'s
    trials): the profile, a context that holds
    the longest request, step times divided by the speed (given ones too), then the
    user's ``--sim-arg``s, which win."""
    from tailreplay.sim.launcher import sim_process
    from tailreplay.sim.profiles import fit_context, profile

    p = profile(profile_name)
    extra = list(sim_args)
    timed = {f"--{name.replace('_', '-')}": float(getattr(p, name)) for name in _TIMED_PARAMS}
    for flag in timed:
        given = [a for a in extra if a.startswith(flag + "=")]
        if given:
            extra = [a for a in extra if a not in given]
            try:
                timed[flag] = float(given[-1].split("=", 1)[1])
            except ValueError:
                raise UsageError(f"--sim-arg {given[-1]}: not a number") from None

    def fresh(longest: int) -> AbstractContextManager[str]:
        sized = fit_context(p, longest)  # as replay sizes its built-in simulator
        args = [
            "--profile",
            profile_name,
            "--max-model-len",
            str(sized.max_model_len),
            "--kv-tokens",
            str(sized.kv_tokens),
            "--nice",
            "5",
        ]
        for flag, value in timed.items():
            args += [flag, f"{value / speed:.6g}"]
        return sim_process(args + extra)

    return fresh
