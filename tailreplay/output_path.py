"""The check every output file gets before any work is done."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from tailreplay.errors import UsageError

__all__ = ["check_output_file"]


def check_output_file(flag: str, path: Path, *, inputs: Iterable[Path] = ()) -> None:
    """Refuse an output whose folder is missing, which is a folder, or which is an input.

    >>> check_output_file("-o", Path("out.msgpack"), inputs=[Path("in.msgpack")])
    """
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: no such directory {path.parent}")
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")
    if path.exists() and any(p.exists() and os.path.samefile(p, path) for p in inputs):
        raise UsageError(f"{path}: the output is also an input; choose another {flag}")
