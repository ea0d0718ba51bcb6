"""``replay --slo-stop``: the option (what it watches: ``studies/watched_objectives.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

__all__ = ["slo_stop_option"]

F = TypeVar("F", bound=Callable[..., object])


def slo_stop_option(f: F) -> F:
    """``--slo-stop``, and the hidden ``--no-slo-report`` of callers that judge the
    results themselves (``capacity``: its trials need the stop, not the report)."""
    f = click.option("--no-slo-report", "slo_report", flag_value=False, default=True, hidden=True)(
        f
    )
    return click.option(
        "--slo-stop",
        type=click.Choice(["now", "after-sending"]),
        help="Stop once a --slo objective on latency, TTFT or error rate is missed whatever "
        "the rest of the run does (enough requests already over its limit): now, sending no "
        "more; or after-sending, once the whole schedule is sent. Requests in flight are "
        "cancelled; the exit code is 1.",
    )(f)
