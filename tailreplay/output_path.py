"""The check every command's output-file option shares, as a click callback."""

from __future__ import annotations

from pathlib import Path

import click

from tailreplay.errors import UsageError

__all__ = ["check_output_file", "output_file"]


def check_output_file(flag: str, path: Path) -> None:
    """Refuse, before any work, an output whose folder is missing or which is a folder."""
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: no such directory {path.parent}")
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")


def output_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``check_output_file`` as a click callback, at parse time."""
    if value is not None:
        check_output_file(param.opts[0] if param.opts else str(param.name), value)
    return value
