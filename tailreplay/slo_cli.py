"""The SLO flags, shared by ``report`` and ``replay`` so the two cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["slo_options"]

F = TypeVar("F", bound=Callable[..., Any])


def slo_options(f: F) -> F:
    """Add ``--slo`` (the command gets ``slos``) and ``--slo-min-score``."""
    f = click.option(
        "--slo-min-score",
        type=click.FloatRange(0, 1),
        default=1.0,
        show_default=True,
        help="Weighted share of the objectives that must be met; below it the exit code is 1.",
    )(f)
    return click.option(
        "--slo",
        "slos",
        multiple=True,
        help="Objective METRIC:PCT<=LIMIT[*WEIGHT] (repeatable, or comma-separated), e.g. "
        "latency:p99<=800ms*10, ttft:p95<=1.2x (of the recorded), error_rate<=1%.",
    )(f)
