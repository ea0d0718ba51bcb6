"""The check every command's output-file option shares, as a click callback."""

from __future__ import annotations

from pathlib import Path

import click

from tailreplay.errors import UsageError

__all__ = ["output_file"]


def output_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """Refuse, before any work, an output whose folder is missing or which is a folder."""
    if value is None:
        return None
    flag = param.opts[0] if param.opts else str(param.name)
    if not value.parent.is_dir():
        raise UsageError(f"{flag} {value}: no such directory {value.parent}")
    if value.is_dir():
        raise UsageError(f"{flag} {value}: is a directory; give a file name")
    return value
