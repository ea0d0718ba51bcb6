"""``tailreplay sim``: run the built-in OpenAI-compatible LLM server simulator."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from tailreplay.cli.options import HOST_PORT
from tailreplay.errors import UsageError
from tailreplay.sim.profiles import DEFAULT_PROFILE, PROFILES
from tailreplay.units import host_port

if TYPE_CHECKING:
    from tailreplay.sim.launcher import BuiltinSim

__all__ = ["builtin_sim", "sim"]

F = TypeVar("F", bound=Callable[..., Any])

# Profile parameters that can be overridden from the command line: flag -> (field, type).
_OVERRIDES: dict[str, tuple[str, type]] = {
    "--max-num-seqs": ("max_num_seqs", int),
    "--kv-tokens": ("kv_tokens", int),
    "--max-model-len": ("max_model_len", int),
    "--max-batched-tokens": ("max_batched_tokens", int),
    "--prefill-base-ms": ("prefill_base_ms", float),
    "--prefill-per-token-ms": ("prefill_per_token_ms", float),
    "--decode-base-ms": ("decode_base_ms", float),
    "--decode-per-seq-ms": ("decode_per_seq_ms", float),
    "--queue-limit": ("queue_limit", int),
    "--output-mean": ("output_mean", float),
    "--output-shape": ("output_shape", float),
    "--served-model": ("served_model", str),
    "--reasoning-share": ("reasoning_share", float),
    "--reasoning-tokens": ("reasoning_tokens", int),
    "--block-size": ("block_size", int),
    "--spec-tokens": ("spec_tokens", int),
}


def _with_overrides(f: F) -> F:
    for flag, (name, kind) in reversed(_OVERRIDES.items()):
        f = click.option(
            flag, name, type=kind, default=None, help=f"Override the profile's {name}."
        )(f)
    return f


@click.command()
@click.option(
    "--listen",
    type=HOST_PORT,
    default="127.0.0.1:8000",
    show_default=True,
    help="HOST:PORT (port 0: any free port).",
)
@click.option(
    "--profile",
    "profile_name",
    type=click.Choice(sorted(PROFILES)),
    default=DEFAULT_PROFILE,
    show_default=True,
    help="fast: an 8B model on one H100; default: the same on one 24 GB GPU.",
)
@click.option(
    "--seed", default=0, show_default=True, help="Seed for output lengths, text and faults."
)
@click.option("--fault-error-rate", default=0.0, help="Share of requests answered with 500.")
@click.option("--fault-stall-ms", default=0.0, help="Delay before each request's first token.")
@click.option("--fault-reset-rate", default=0.0, help="Share of streams reset mid-way.")
@click.option(
    "--nice",
    type=click.IntRange(0, 19),
    default=0,
    show_default=True,
    help="Lower this process's CPU priority (replay's built-in target uses 5, so on a busy "
    "machine the replayer's timing comes first).",
)
@click.option(
    "--no-prefix-cache",
    is_flag=True,
    help="Turn the prefix cache off: every prompt is prefilled in full, and usage "
    "reports no cached_tokens.",
)
@click.option(
    "--exit-with-parent",
    "parent_pid",
    type=int,
    hidden=True,
    help="Stop when the process with this pid is no longer the parent (the launcher's).",
)
@_with_overrides
def sim(
    listen: tuple[str, int],
    profile_name: str,
    seed: int,
    fault_error_rate: float,
    fault_stall_ms: float,
    fault_reset_rate: float,
    nice: int,
    no_prefix_cache: bool,
    parent_pid: int | None,
    **overrides: Any,
) -> None:
    """Run the built-in continuous-batching LLM server simulator (OpenAI-compatible)."""
    from tailreplay.sim.faults import Faults
    from tailreplay.sim.launcher import READY_PREFIX
    from tailreplay.sim.profiles import profile
    from tailreplay.sim.server import SimConfig, run

    host, port = listen
    if nice:
        os.nice(nice)
    try:
        if no_prefix_cache:
            overrides["prefix_caching"] = False
        chosen = profile(profile_name).with_overrides(**overrides)
        faults = Faults(fault_error_rate, fault_stall_ms, fault_reset_rate, seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    config = SimConfig(
        profile=chosen, seed=seed, host=host, port=port, faults=faults, parent_pid=parent_pid
    )

    def ready(url: str) -> None:
        click.echo(f"{READY_PREFIX}{url}")
        sys.stdout.flush()

    try:
        asyncio.run(run(config, ready))
    except OSError as exc:
        # A port in use is the user's --listen, as for the proxy: a usage error.
        raise UsageError(
            f"--listen {host_port(host, port)}: cannot listen ({exc.strerror or exc})"
        ) from None


def builtin_sim(profile_name: str, seed: int, sim_args: Sequence[str]) -> BuiltinSim:
    """``replay``'s built-in target, with its ``--sim-arg`` values checked by this
    command's own parser (a wrong one is exit 2 before anything runs).

    >>> builtin_sim("fast", 0, ["--max-model-len=200000"]).overrides
    (('max_model_len', 200000),)
    """
    from tailreplay.sim.launcher import BuiltinSim

    try:
        ctx = sim.make_context("sim", list(sim_args), help_option_names=[])
    except click.ClickException as exc:
        why = exc.format_message()
        raise UsageError(f"invalid --sim-arg {' '.join(sim_args)!r}: {why}") from None
    given = {
        name: value
        for name, value in ctx.params.items()
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    }
    fields = {name for name, _ in _OVERRIDES.values()}
    return BuiltinSim(
        profile=given.get("profile_name", profile_name),
        seed=seed,
        sim_args=tuple(sim_args),
        overrides=tuple((k, v) for k, v in given.items() if k in fields),
    )
