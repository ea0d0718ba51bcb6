"""Workload models on the command line: ``traces fit``, ``traces synth`` and
``traces validate-model`` (added to the ``traces`` group by ``tailreplay.cli``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from tailreplay.cli.echo import say, show, warn
from tailreplay.cli.option_fields import InputPath, declared_options, take
from tailreplay.cli.options import (
    DURATION,
    FACTOR,
    FiniteRange,
    archives_argument,
    output_option,
    seed_option,
    skip_corrupt_option,
    write_text,
)
from tailreplay.errors import UsageError
from tailreplay.output_path import check_output_file, is_stdout
from tailreplay.studies.model_check_args import ValidateModelArgs
from tailreplay.traces.workload.scaling import SCALINGS, USERS
from tailreplay.units import parse_time

__all__ = ["fit", "synth", "validate_model"]


@click.command()
@archives_argument
@output_option
@skip_corrupt_option
@seed_option("Seed of the fitting subsample.")
@click.option(
    "--profile",
    type=DURATION,
    help="Also keep the rate's curve over time in bins this long (e.g. 10m for a day), "
    "so synthesis follows it.",
)
def fit(
    files: tuple[Path, ...], out: Path, skip_corrupt: bool, seed: int, profile: float | None
) -> None:
    """Fit a workload model (arrivals, token lengths, mix) to archives; write it as JSON."""
    from tailreplay.traces.workload.fit import fit as fit_workload

    check_output_file("-o", out, inputs=files)
    workload = fit_workload(files, skip_corrupt=skip_corrupt, seed=seed, profile_bin_s=profile)
    write_text(out, json.dumps(workload.to_json(), indent=1) + "\n")
    for line in workload.describe():
        click.echo(line)
    warn(workload.warnings)
    click.echo(f"wrote {out}", err=True)


@click.command()
@click.argument("model", type=InputPath())
@output_option
@click.option("--duration", type=DURATION, help="Length of the synthetic trace, e.g. 10m.")
@click.option("--count", type=click.IntRange(min=1), help="Number of requests.")
@click.option(
    "--rate",
    type=FiniteRange(min=0, min_open=True),
    help="Mean requests per second (default: the fitted rate).",
)
@click.option("--scale", type=FACTOR, help="The fitted rate times this, e.g. 3x.")
@seed_option("Seed of the synthesised draws.")
@click.option("--start", "start", help="Time of the first request (ISO-8601 or unix s).")
@click.option("--flat", is_flag=True, help="Ignore the model's rate curve: a steady rate.")
@click.option(
    "--arrivals",
    type=click.Choice(["model", "poisson"]),
    default="model",
    show_default=True,
    help="poisson: Poisson arrival times at the same mean rate, the same requests "
    "(the baseline `validate-model` compares with).",
)
@click.option(
    "--lengths",
    type=click.Choice(["all", "recent"]),
    default="all",
    show_default=True,
    help="recent: request lengths fitted to the second half of the recording's span "
    "(for a mix that drifted: `traces fit` says whether it did).",
)
@click.option(
    "--scaling",
    type=click.Choice(SCALINGS),
    default=USERS,
    show_default=True,
    help="How a bursty (MMPP) model reaches another --rate: users: as many more "
    "independent users, as bursty; periods: the recording's own periods at that rate "
    "(its busy states more often, with their requests' lengths).",
)
def synth(
    model: Path,
    out: Path,
    duration: float | None,
    count: int | None,
    rate: float | None,
    scale: float | None,
    seed: int,
    start: str | None,
    flat: bool,
    arrivals: str,
    lengths: str,
    scaling: str,
) -> None:
    """Synthesise an archive from a workload model, at any rate and length."""
    from tailreplay.traces.workload.fit import synthesize
    from tailreplay.traces.workload.workload_model import Workload

    if rate is not None and scale is not None:
        raise UsageError("give --rate or --scale, not both")
    check_output_file("-o", out, inputs=[model])
    workload = Workload.load(model)
    warn(workload.warnings)
    the_rate = workload.rate_rps * scale if scale is not None else rate or workload.rate_rps
    written = synthesize(
        workload,
        out,
        duration_s=duration,
        count=count,
        rate_rps=the_rate,
        seed=seed,
        start_ns=_start_ns(start),
        flat=flat,
        arrivals=arrivals,
        lengths=lengths,
        scaling=scaling,
    )
    click.echo(f"wrote {written:,} records to {out}", err=True)
    if not written:
        warn([f"no request fell within --duration at {the_rate:g} req/s: the archive is empty"])


@click.command(name="validate-model")
@declared_options(ValidateModelArgs)
def validate_model(**options: Any) -> None:
    """Replay an archive window, the model's synthesis of it and a Poisson baseline
    against one target, and compare their latency and TTFT percentiles."""
    from tailreplay.errors import NotJudged
    from tailreplay.studies.model_check import CheckConfig, render, run_check, to_json
    from tailreplay.traces.workload.workload_model import Workload

    args = take(ValidateModelArgs, options)
    if args.json_path is not None:
        check_output_file("--json", args.json_path, inputs=[args.archive, args.model_path])
    if args.target is not None and args.speed != 1:
        raise UsageError(
            "--speed shortens the built-in simulator's steps; with --target it "
            "would only raise the load"
        )
    workload = Workload.load(args.model_path)
    warn(workload.warnings)
    workload.lengths_for(args.lengths)  # a model without a recent half: refused before any arm
    if args.target is not None and args.sim_args:
        raise UsageError("--sim-arg configures the built-in simulator, not a --target")
    bad = [a for a in args.sim_args if not a.startswith("--") or "=" not in a]
    if bad:
        raise UsageError(f"--sim-arg takes --NAME=VALUE, not {bad[0]!r}")
    if args.windows > 1 and args.window is None:
        raise UsageError("--windows needs --window: the length of each")
    config = CheckConfig(
        args.archive,
        workload,
        args.out_dir,
        target=args.target,
        sim_profile=args.sim_profile,
        sim_args=args.sim_args,
        window_s=args.window,
        offset_s=args.offset,
        seeds=args.seeds,
        speed=args.speed,
        lag_limit_s=args.lag_limit,
        windows=args.windows,
        lengths=args.lengths,
        scaling=args.scaling,
        overwrite=args.overwrite,
    )
    results = run_check(config, say)  # SIGTERM stops each arm's children (HandledGroup)
    out = say if is_stdout(args.json_path) else show  # with --json -, stdout is the JSON's
    for line in render(results):
        out(line)
    if args.json_path is not None:
        write_text(args.json_path, to_json(results) + "\n")
    bound = [r for r in results if r.unmeasured]
    if bound:
        which = " or ".join(sorted({r.why_unmeasured or "" for r in bound}))
        raise NotJudged(
            f"{len(bound)} of {len(results)} arms were {which}: the comparison is not a "
            "measure of the model; run on a less busy machine, with a lower --speed, or "
            "against a target sized for the load"
        )


def _start_ns(start: str | None) -> int | None:
    if start is None:
        return None
    return parse_time(start)  # between 1970 and 2116, the archive's clock
