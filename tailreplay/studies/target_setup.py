"""What a replay knows of its target before the run: the built-in simulator, the cost
that ranks the tail, the context a stretched request must fit; and fresh simulators,
one per replay, for the studies that run many (``capacity``, ``validate-model``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace

from yarl import URL

from tailreplay.errors import UsageError
from tailreplay.replayer.schedule import TailCost
from tailreplay.sim.launcher import BuiltinSim, sim_process
from tailreplay.sim.profiles import DEFAULT_PROFILE, fit_context, profile
from tailreplay.studies.replay_args import ReplayArgs

__all__ = [
    "SERVED_LOAD",
    "TargetFactory",
    "TargetModel",
    "fresh_simulators",
    "fresh_targets",
    "own_prompts",
    "serving_factor",
    "target_model",
    "timed_sim_args",
]

TargetFactory = Callable[[int], AbstractContextManager[str]]
"""Given the longest request to replay (input + output tokens), a fresh target for one
replay: a context that yields its base URL (and stops it after)."""


@dataclass(frozen=True)
class TargetModel:
    builtin: BuiltinSim | None
    """The built-in simulator; None with --target."""
    tail_cost: TailCost
    max_context: int | None
    """The context a tail budget must fit, when known."""


def target_model(
    builtin: BuiltinSim | None,
    tail_cost: tuple[float, float] | None,
    max_context: int | None,
) -> TargetModel:
    """The target as the replay takes it. The tail's cost is --tail-cost, else the
    simulator profile's (without --target: the one that runs; with it: the default):
    prefill per prompt token, one decode step per output token. The context is
    --max-context, or the simulator's where --sim-arg pins it (else the simulator is
    sized to fit every request, stretched)."""
    model = builtin.sized(None) if builtin is not None else profile(DEFAULT_PROFILE)
    cost = TailCost(model.prefill_per_token_ms, model.decode_ms(1))
    if tail_cost is not None:
        cost = TailCost(*tail_cost)
    pinned = dict(builtin.overrides) if builtin is not None else {}
    limits = [max_context, pinned.get("max_model_len"), pinned.get("kv_tokens")]
    known = [n for n in limits if n is not None]
    return TargetModel(builtin, cost, min(known) if known else None)


_TIMED_PARAMS = ("prefill_base_ms", "prefill_per_token_ms", "decode_base_ms", "decode_per_seq_ms")


def own_prompts(args: ReplayArgs, target: URL | None, replay: int) -> ReplayArgs:
    """``args`` for a study's ``replay``-th replay (from 0) against ``target``. A given
    target keeps its prefix cache from one replay to the next, and the same prompts
    again would be served from it (llama.cpp's server cached 96-100% of every later
    capacity trial's prompt tokens; validate-model's model and Poisson arms hold the
    same requests): each replay draws prompts on a seed of its own, the replay's
    seed plus ``replay``, the window's prefix sharing kept within it. A fresh
    simulator (``target`` None) starts empty: ``args`` as they are."""
    return args if target is None else replace(args, seed=args.seed + replay)


def fresh_targets(
    target: URL | None,
    profile_name: str,
    speed: float,
    sim_args: tuple[str, ...],
    faster: float = 1.0,
) -> TargetFactory:
    """A target per replay for the studies that run many: ``target`` each time when
    given (``--target``), else a fresh built-in simulator (``fresh_simulators``)."""
    if target is None:
        return fresh_simulators(profile_name, speed, sim_args, faster)
    url = str(target)
    return lambda _: contextlib.nullcontext(url)


SERVED_LOAD = 0.8
"""``serving_factor`` sizes a simulator so that the busiest stretch of a load asks this
share of its capacity: busy enough that queues form in bursts, with room to serve them."""


def timed_sim_args(sim_args: tuple[str, ...]) -> list[str]:
    """The ``--sim-arg``s that set a step time (the user sized the engine themselves)."""
    flags = tuple(f"--{name.replace('_', '-')}=" for name in _TIMED_PARAMS)
    return [a for a in sim_args if a.startswith(flags)]


def serving_factor(
    profile_name: str, longest: int, peak_rps: float, lengths: tuple[float, float]
) -> float:
    """How much faster than ``profile_name`` (sized for ``longest``) a simulator's steps
    must be for a load whose busiest stretch runs at ``peak_rps`` with requests of mean
    (input, output) ``lengths`` to ask ``SERVED_LOAD`` of its capacity
    (``EngineProfile.capacity_rps``); at least 1: an engine that serves it already is
    kept as it is."""
    capacity = fit_context(profile(profile_name), longest).capacity_rps(*lengths)
    return max(1.0, peak_rps / (SERVED_LOAD * capacity))


def fresh_simulators(
    profile_name: str, speed: float, sim_args: tuple[str, ...], faster: float = 1.0
) -> TargetFactory:
    """Fresh built-in simulators, one per replay (``validate-model``'s arms, ``capacity``'s
    trials): the profile, a context that holds the longest request, step times divided by
    the speed (given ones too) and the profile's own by ``faster`` as well (an engine
    sized to a load: ``serving_factor``), then the user's ``--sim-arg``s, which win."""
    p = profile(profile_name)
    extra = list(sim_args)
    timed = {
        f"--{name.replace('_', '-')}": float(getattr(p, name)) / faster for name in _TIMED_PARAMS
    }
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
