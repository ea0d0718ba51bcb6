"""The ``tailreplay`` command line: the group, its console entry points, its commands.

Commands are thin: parse options (click types, ``options.py``), build a config,
call one library function, print, set the exit code. Errors from the library
(``TailreplayError``) become one line on stderr and the documented exit code;
click's own usage errors exit 2. The command modules never import this one:
it imports them and adds them to the group.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from tailreplay.cli.proxy import proxy
from tailreplay.cli.replay import replay
from tailreplay.cli.report import report
from tailreplay.cli.sim import sim
from tailreplay.cli.traces import traces
from tailreplay.errors import TailreplayError
from tailreplay.version import __version__

__all__ = ["cli", "main", "replay_main", "sim_main"]


class TailreplayGroup(click.Group):
    """A click group that turns library errors and wrong flags into one line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TailreplayError as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:  # click's own checks (ranges, choices, unknown flags)
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            # The `replay` script runs `tailreplay replay` under the name "replay".
            where = " ".join(dict.fromkeys(where.split()))
            click.echo(f"Error: {exc.format_message()} (see '{where} --help')", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=TailreplayGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tailreplay")
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail to stderr.")
def cli(verbose: bool) -> None:
    """Capture LLM API traffic and replay it with the same tail."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="warning: %(message)s" if not verbose else "%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


for _command in (traces, sim, proxy, replay, report):
    cli.add_command(_command)


def _run(args: list[str], prog_name: str) -> None:
    try:
        cli(args, prog_name=prog_name)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


def main() -> None:
    """The ``tailreplay`` console script (and ``python -m tailreplay``)."""
    _run(sys.argv[1:], "tailreplay")


def replay_main() -> None:
    """The ``replay`` console script: ``tailreplay replay`` under a shorter name."""
    _run(["replay", *sys.argv[1:]], "replay")


def sim_main() -> None:
    """``python -m tailreplay.sim``: ``tailreplay sim``."""
    _run(["sim", *sys.argv[1:]], "tailreplay")
