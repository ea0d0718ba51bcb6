"""The ``tailreplay`` command line. Commands are thin: parse options, call the library.

Errors from the library (``TailreplayError``) become one line on stderr and the
documented exit code; click's own usage errors exit 2.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from tailreplay.errors import TailreplayError
from tailreplay.version import __version__

__all__ = ["cli", "main"]


class TailreplayGroup(click.Group):
    """A click group that turns library errors into one line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TailreplayError as exc:
            click.echo(f"Error: {exc}", err=True)
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


def _register() -> None:
    from tailreplay.proxy_cli import proxy
    from tailreplay.replay_cli import replay
    from tailreplay.report_cli import report
    from tailreplay.sim_cli import sim
    from tailreplay.traces_cli import traces

    cli.add_command(traces)
    cli.add_command(sim)
    cli.add_command(proxy)
    cli.add_command(replay)
    cli.add_command(report)


_register()


def main() -> None:
    try:
        cli(prog_name="tailreplay")
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
