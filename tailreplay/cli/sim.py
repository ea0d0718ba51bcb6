"""``tailreplay sim``: run the built-in OpenAI-compatible LLM server simulator."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from tailreplay.cli.option_fields import declared_options, take
from tailreplay.errors import UsageError
from tailreplay.sim.settings import SimArgs
from tailreplay.units import host_port

if TYPE_CHECKING:
    from tailreplay.sim.launcher import BuiltinSim

__all__ = ["PROFILE_OVERRIDES", "builtin_sim", "sim"]

F = TypeVar("F", bound=Callable[..., Any])

# Profile parameters that can be overridden from the command line: flag -> (field, type).
PROFILE_OVERRIDES: dict[str, tuple[str, type]] = {
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
    for flag, (name, kind) in reversed(PROFILE_OVERRIDES.items()):
        f = click.option(
            flag, name, type=kind, default=None, help=f"Override the profile's {name}."
        )(f)
    return f


@click.command()
@declared_options(SimArgs)
@_with_overrides
def sim(**options: Any) -> None:
    """Run the built-in continuous-batching LLM server simulator (OpenAI-compatible)."""
    from tailreplay.sim.faults import Faults
    from tailreplay.sim.launcher import READY_PREFIX
    from tailreplay.sim.profiles import profile
    from tailreplay.sim.server import SimConfig, run

    args, overrides = take(SimArgs, options), options  # what is left: the profile's fields
    host, port = args.listen
    if args.nice:
        os.nice(args.nice)
    try:
        if args.no_prefix_cache:
            overrides["prefix_caching"] = False
        chosen = profile(args.profile_name).with_overrides(**overrides)
        faults = Faults(
            args.fault_error_rate, args.fault_stall_ms, args.fault_reset_rate, args.seed
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    config = SimConfig(
        profile=chosen,
        seed=args.seed,
        host=host,
        port=port,
        faults=faults,
        parent_pid=args.parent_pid,
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
    fields = {name for name, _ in PROFILE_OVERRIDES.values()}
    return BuiltinSim(
        profile=given.get("profile_name", profile_name),
        seed=seed,
        sim_args=tuple(sim_args),
        overrides=tuple((k, v) for k, v in given.items() if k in fields),
    )
