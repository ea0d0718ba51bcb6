"""The ``tailreplay`` command line: the group, its console entry points, its commands.

Commands are thin: parse options (click types, ``options.py``), build a config,
call one library function, print, set the exit code. Errors from the library
(``TailreplayError``) become one line on stderr and the documented exit code;
click's own usage errors exit 2. The command modules never import this one:
it imports them and adds them to the group.
"""

from __future__ import annotations

import sys

import click

from tailreplay.cli.handling import HandledGroup, run_standalone, setup_logging
from tailreplay.cli.proxy import proxy
from tailreplay.cli.replay import replay
from tailreplay.cli.report import report
from tailreplay.cli.sim import sim
from tailreplay.cli.traces import traces
from tailreplay.version import __version__

__all__ = ["cli", "main", "replay_main", "sim_main"]


@click.group(cls=HandledGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tailreplay")
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail to stderr.")
def cli(verbose: bool) -> None:
    """Capture LLM API traffic and replay it with the same tail."""
    setup_logging(verbose)


for _command in (traces, sim, proxy, replay, report):
    cli.add_command(_command)


def main() -> None:
    """The ``tailreplay`` console script (and ``python -m tailreplay``)."""
    cli(sys.argv[1:], prog_name="tailreplay")


def replay_main() -> None:
    """The ``replay`` console script: ``tailreplay replay`` under a shorter name."""
    setup_logging(verbose=False)
    run_standalone(replay, sys.argv[1:], "replay")


def sim_main() -> None:
    """``python -m tailreplay.sim``: ``tailreplay sim``."""
    cli(["sim", *sys.argv[1:]], prog_name="tailreplay")
