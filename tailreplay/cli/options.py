"""What the commands share: the parameter types of everything a user types, and option sets.

Values are parsed by click types at parse time: factors (``2x``, ``200%``),
speeds (``1x..4x``), durations, sizes, HOST:PORT, K=V pairs, shards, headers,
URLs, bucket edges. A wrong value raises ``UsageError`` naming the flag, which
the group prints as one line with exit 2 (click's own range checks print
click's usage message, also with exit 2).

Option sets used by more than one command are decorators here: the archives
argument, ``-o/--output``, ``--skip-corrupt``, ``--buckets``, the SLO flags and
the OTLP flags (which hand the command one ``otlp: OtlpOptions``). Those declared
once as settings (the archives, ``--skip-corrupt``, ``--scrape``, the SLO flags) are
generated from their declarations (``cli/option_fields.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from tailreplay import option_values as values
from tailreplay.cli.option_fields import (
    FiniteRange,
    Parsed,
    click_param,
    declared_options,
    param_flag,
    take,
)
from tailreplay.declared import Setting
from tailreplay.errors import UsageError
from tailreplay.exporters.otlp_options import LIVE_TRAFFIC, OtlpOptions
from tailreplay.output_path import check_output_file
from tailreplay.replayer.settings import SCRAPE
from tailreplay.replayer.speed import parse_speed
from tailreplay.report.slo import SLO, SLO_BY, SLO_MIN_SCORE, SLO_WINDOW
from tailreplay.shared_options import SKIP_CORRUPT
from tailreplay.traces.archive.folders import ARCHIVES, expand_folders

__all__ = [
    "BODY_DROP",
    "BODY_SET",
    "BUCKETS",
    "DURATION",
    "FACTOR",
    "HEADER",
    "HOST_PORT",
    "HTTP_URL",
    "KEY_VALUE",
    "MODEL_MAP",
    "SHARD",
    "SIZE",
    "SLO_OPTIONS",
    "SPEED_TEXT",
    "TAIL_COST",
    "FiniteRange",
    "Parsed",
    "archive_args",
    "archive_paths",
    "archives_argument",
    "buckets_option",
    "otlp_from_params",
    "otlp_options",
    "output_file",
    "output_option",
    "scrape_option",
    "seed_option",
    "skip_corrupt_option",
    "slo_options",
    "write_text",
]

F = TypeVar("F", bound=Callable[..., Any])


FILE_OUT = Parsed.of(values.FILE_OUT)
FACTOR = Parsed.of(values.FACTOR)


def _speed_text(text: str, flag: str) -> str:
    parse_speed(text)  # refuses what replay would
    return text


SPEED_TEXT = Parsed("speed", _speed_text)
"""``--speed`` checked as replay parses it, and kept as given (for a command line)."""
DURATION = Parsed.of(values.DURATION)
SIZE = Parsed.of(values.SIZE)
HOST_PORT = Parsed.of(values.HOST_PORT)
HTTP_URL = Parsed.of(values.HTTP_URL)
KEY_VALUE = Parsed.of(values.KEY_VALUE)
MODEL_MAP = Parsed.of(values.MODEL_MAP)
SHARD = Parsed.of(values.SHARD)
HEADER = Parsed.of(values.HEADER)
BUCKETS = Parsed.of(values.BUCKETS)
TAIL_COST = Parsed.of(values.TAIL_COST)
BODY_SET = Parsed.of(values.BODY_SET)
BODY_DROP = Parsed.of(values.BODY_DROP)


def output_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``check_output_file`` as a click callback: a bad output fails before any work."""
    if value is not None:
        check_output_file(param_flag(param), value)
    return value


def archive_paths(
    _ctx: click.Context, _param: click.Parameter, value: tuple[Path, ...]
) -> tuple[Path, ...]:
    """Archives as given, each folder replaced by the archives in it (in the order the
    proxy wrote them), as a click callback: ``ARCHIVES``' reading, for an option."""
    return tuple(expand_folders(value))


def archive_args(name: str = "files") -> Callable[[F], F]:
    """The archives argument (one or more; folders read as their archives) as ``name``."""
    return click_param(name, ARCHIVES)


archives_argument = archive_args()

output_option = click.option(
    "-o",
    "--output",
    "--out",
    "out",
    required=True,
    type=FILE_OUT,
    callback=output_file,
    help="File to write.",
)

scrape_option = click_param("scrapes", SCRAPE)

skip_corrupt_option = click_param("skip_corrupt", SKIP_CORRUPT)


def seed_option(help: str) -> Callable[[F], F]:
    """``--seed``: numpy's generators take a seed of 0 to 2^63 - 1 at most (a negative
    one is a traceback deep in numpy), so the option says so in one line (exit 2)."""
    return click.option(
        "--seed", default=0, show_default=True, type=click.IntRange(0, 2**63 - 1), help=help
    )


buckets_option = click.option(
    "--buckets",
    type=BUCKETS,
    default="50,256,512,1024,2048",
    show_default=True,
    help="Input-token bucket edges.",
)


def slo_options(f: F) -> F:
    """Add ``--slo`` (the command gets ``slos``, a list of Objective), ``--slo-min-score``,
    ``--slo-window`` and ``--slo-by`` (declared in ``report/slo.py``)."""
    for name, setting in reversed(SLO_OPTIONS):
        f = click_param(name, setting)(f)
    return f


SLO_OPTIONS: list[tuple[str, Setting[Any]]] = [
    ("slos", SLO),
    ("slo_min_score", SLO_MIN_SCORE),
    ("slo_window", SLO_WINDOW),
    ("slo_by", SLO_BY),
]
"""The SLO options as every command that judges a run names them."""


def otlp_from_params(kwargs: dict[str, Any]) -> OtlpOptions:
    """Take the OTLP flags out of a command's keyword arguments, as one OtlpOptions."""
    otlp = take(OtlpOptions, kwargs)
    if (otlp.cert is None) != (otlp.key is None):
        raise UsageError("--otlp-cert and --otlp-key go together (mTLS needs both)")
    return otlp


def otlp_options(*, spans_of_live_traffic: bool = True) -> Callable[[F], F]:
    """The OTLP flags; the command gets one ``otlp: OtlpOptions`` argument instead.

    ``spans_of_live_traffic`` adds the sampling and content flags (the proxy and the
    replayer; an archive export sends every record).
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs["otlp"] = otlp_from_params(kwargs)
            return func(*args, **kwargs)

        unless = None if spans_of_live_traffic else LIVE_TRAFFIC
        return declared_options(OtlpOptions, unless=unless)(wrapper)  # type: ignore[return-value]

    return decorate


def write_text(path: Path, text: str) -> None:
    """``text`` to ``path``, whole (0600), or to stdout for ``-``; a failure is one
    ``InputError`` line."""
    from tailreplay.errors import InputError
    from tailreplay.output_path import write_output

    try:
        write_output(path, text)
    except OSError as exc:
        raise InputError(f"{path}: write failed ({exc.strerror or exc})") from None
