"""``tailreplay capacity``: how much more of a recorded window the target serves at the SLO."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tailreplay.cli.echo import say, show
from tailreplay.cli.option_fields import declared_options, take
from tailreplay.cli.options import write_text
from tailreplay.errors import NotJudged, RunFailed
from tailreplay.output_path import check_output_file, is_stdout
from tailreplay.studies.capacity_args import CapacityArgs

if TYPE_CHECKING:
    from tailreplay.report.capacity_result import Search

__all__ = ["capacity"]


@click.command(
    epilog="""\b
Example:
  tailreplay capacity capture.msgpack --slo 'latency:p99<=2000ms' --require 2x --json cap.json

Exit codes: 0 a capacity found (at least --require; a search the client cut short
after a pass warns), 1 no capacity (the lowest factor, --min, failed, or the client
was the bottleneck before any pass) or one below --require, 2 usage, 3 unreadable
input, 130 interrupted.""",
)
@declared_options(CapacityArgs)
def capacity(**options: Any) -> None:
    """Find the largest factor of a recorded window the target serves within the SLO."""
    from tailreplay.studies.capacity import CapacityStudy, check_study, run_capacity

    args = take(CapacityArgs, options)
    study = CapacityStudy(
        args.archives,
        tuple(args.slos),
        target=args.target,
        sim_profile=args.sim_profile,
        sim_args=args.sim_args,
        twin=args.twin,
        by=args.by,
        window_s=args.window,
        min_factor=args.min_factor,
        max_factor=args.max_factor,
        precision=args.precision,
        repeats=args.repeats,
        drain_s=args.drain,
        tail_stretch=args.tail_stretch,
        lag_limit_s=args.lag_limit,
        scrapes=args.scrapes,
        sweep_step=args.sweep,
        out_dir=args.out_dir,
        budget_s=args.budget,
        overwrite=args.overwrite,
    )
    check_study(study)  # makes --out-dir, where the outputs may go: checked after it
    for flag, path in (("--json", args.json_path), ("--plot", args.plot_path)):
        if path is not None:
            check_output_file(flag, path, inputs=list(args.archives))
    result = run_capacity(study, say)  # SIGTERM stops a trial's children (HandledGroup)
    _finish(result, args.json_path, args.plot_path, args.require)


def _finish(
    result: Search, json_path: Path | None, plot_path: Path | None, require: float | None
) -> None:
    """The table on stdout; the JSON and the chart where asked; exit 1 when the search
    stopped early or the capacity is under ``require``."""
    from tailreplay.report.capacity_result import coarse_pass, plot, render, to_json

    out = say if is_stdout(json_path) else show  # with --json -, stdout is the JSON's
    for line in render(result):
        out(line)
    if json_path is not None:
        write_text(json_path, json.dumps(to_json(result), indent=1) + "\n")
    if plot_path is not None:
        write_text(plot_path, plot(result) + "\n")
    if result.capacity is None:
        if result.stopped is not None and coarse_pass(result):
            raise NotJudged(
                f"the search stopped before any full replay passed{coarse_pass(result)}: "
                f"{result.stopped}"
            )
        if result.stopped is not None:
            raise NotJudged(f"the search stopped before any trial passed: {result.stopped}")
        lowest = min((t.factor for t in result.trials), default=0.0)
        raise RunFailed(f"no capacity at the SLO: below {lowest:g}x, the lowest factor tried")
    if result.stopped is not None:
        # What passed before the client gave out was measured: a lower bound.
        bound = f"{result.capacity:g}x is a lower bound"
        say(f"warning: the search stopped: {result.stopped}; {bound}")
    if require is not None and result.capacity < require:
        raise RunFailed(f"the capacity ({result.capacity:g}x) is under --require {require:g}x")
