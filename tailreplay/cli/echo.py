"""Lines a command writes for people: each shown through ``printable``, since a line
may quote what came from outside (archive strings, a target's words, file names)."""

from __future__ import annotations

import click

from tailreplay.printable import printable

__all__ = ["say", "show", "warn"]


def show(line: str) -> None:
    """A line of the command's output, on stdout."""
    click.echo(printable(line))


def say(line: str) -> None:
    """A line of progress or notice, on stderr."""
    click.echo(printable(line), err=True)


def warn(lines: list[str]) -> None:
    """``warning:`` lines, on stderr."""
    for line in lines:
        say(f"warning: {line}")
