"""``tailreplay sim``: run the built-in OpenAI-compatible LLM server simulator."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from tailreplay.cli.echo import say, show, warn
from tailreplay.cli.option_fields import InputPath, declared_options, take
from tailreplay.cli.options import skip_corrupt_option
from tailreplay.errors import UsageError
from tailreplay.output_path import check_output_file
from tailreplay.sim.profiles import DEFAULT_PROFILE, PROFILES
from tailreplay.sim.settings import SimArgs
from tailreplay.units import host_port

if TYPE_CHECKING:
    from tailreplay.sim.launcher import BuiltinSim

__all__ = ["PROFILE_OVERRIDES", "builtin_sim", "calibrate", "sim"]

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


# A group that runs the simulator when no subcommand is given; its example is its own
# (the command line's examples are its leaves').
@click.group(
    invoke_without_command=True,
    epilog="\b\nExample:\n  tailreplay sim --listen 127.0.0.1:8000 --profile fast",
)
@declared_options(SimArgs)
@_with_overrides
@click.pass_context
def sim(ctx: click.Context, /, **options: Any) -> None:
    """Run the built-in continuous-batching LLM server simulator (OpenAI-compatible)."""
    if ctx.invoked_subcommand is not None:
        return
    from tailreplay.sim.faults import Faults
    from tailreplay.sim.launcher import READY_PREFIX
    from tailreplay.sim.profiles import departures, profile
    from tailreplay.sim.server import SimConfig, run

    args, overrides = take(SimArgs, options), options  # what is left: the profile's fields
    host, port = args.listen
    if args.nice:
        os.nice(args.nice)
    try:
        if args.no_prefix_cache:
            overrides["prefix_caching"] = False
        base = profile(args.profile_name)
        chosen = base.with_overrides(**overrides)
        faults = Faults(
            args.fault_error_rate, args.fault_stall_ms, args.fault_reset_rate, args.seed
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.profile_name not in PROFILES:
        warn(departures(args.profile_name, overrides))
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


@sim.command(name="calibrate")
@click.argument("results", nargs=-1, required=True, type=InputPath())
@click.option(
    "-o",
    "--out",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The fitted profile (JSON, 0600), for `tailreplay sim --profile FILE`.",
)
@click.option(
    "--base",
    type=click.Choice(sorted(PROFILES)),
    default=DEFAULT_PROFILE,
    show_default=True,
    help="The profile whose values stand where the results cannot fit one.",
)
@skip_corrupt_option
def calibrate(results: tuple[Path, ...], out: Path, base: str, skip_corrupt: bool) -> None:
    """Fit the simulator's profile to a replay's results: prefill and decode costs from
    the streamed answers' first tokens and inter-token gaps, and the limits they show."""
    from tailreplay.private import write_whole
    from tailreplay.sim.calibrate import calibrate as fit
    from tailreplay.sim.calibrate import summary_lines
    from tailreplay.sim.profiles import profile

    check_output_file("-o", out, inputs=results)
    _refuse_repeated(results)
    calibration = fit(results, profile(base), skip_corrupt=skip_corrupt)
    write_whole(out, json.dumps(calibration.to_json(), indent=2) + "\n")
    for line in summary_lines(calibration):
        show(line)
    warn(list(calibration.warnings))
    say(f"wrote {out}")


def _refuse_repeated(results: Sequence[Path]) -> None:
    """One file given twice would be read twice, on one clock: every request decoding
    beside its own copy, so the batches seen double (and the per-sequence cost halves)."""
    seen: dict[tuple[int, int], Path] = {}
    for path in results:
        try:
            st = path.stat()
        except OSError:
            continue  # the reader says why it cannot read it
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise UsageError(
                f"{path}: given twice (as {seen[key]}): a calibration would count each of "
                "its requests twice"
            )
        seen[key] = path


def builtin_sim(profile_name: str, seed: int, sim_args: Sequence[str]) -> BuiltinSim:
    """``replay``'s built-in target, with its ``--sim-arg`` values checked by this
    command's own parser (a wrong one is exit 2 before anything runs).

    >>> builtin_sim("fast", 0, ["--max-model-len=200000"]).overrides
    (('max_model_len', 200000),)
    """
    from tailreplay.sim.launcher import BuiltinSim

    try:
        ctx = sim.make_context("sim", list(sim_args), help_option_names=[], allow_extra_args=False)
    except click.ClickException as exc:
        why = exc.format_message()
        raise UsageError(f"invalid --sim-arg {' '.join(sim_args)!r}: {why}") from None
    given = {
        name: value
        for name, value in ctx.params.items()
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    }
    fields = {name for name, _ in PROFILE_OVERRIDES.values()}
    try:  # values no profile holds (--max-num-seqs=0, --decode-base-ms=nan): exit 2 now
        from tailreplay.sim.profiles import PROFILES as known

        chosen = known.get(given.get("profile_name", profile_name), known[DEFAULT_PROFILE])
        chosen.with_overrides(**{k: v for k, v in given.items() if k in fields})
    except ValueError as exc:
        raise UsageError(f"invalid --sim-arg {' '.join(sim_args)!r}: {exc}") from None
    builtin = BuiltinSim(
        profile=given.get("profile_name", profile_name),
        seed=seed,
        sim_args=tuple(sim_args),
        overrides=tuple((k, v) for k, v in given.items() if k in fields),
    )
    if builtin.profile not in PROFILES:  # a calibrated twin: said where it runs outside it
        from tailreplay.sim.profiles import departures

        warn(departures(builtin.profile, dict(builtin.overrides)))  # unusable: exit 3
    return builtin
