"""The check every output file gets before any work is done, and ``-`` for stdout."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path, PosixPath

from tailreplay.errors import UsageError

__all__ = [
    "STDOUT",
    "FolderPath",
    "check_output_file",
    "into_folder",
    "is_stdout",
    "write_output",
]

STDOUT = Path("-")
"""``--json -``: the document goes to stdout, and what the command says for people
moves to stderr."""


class FolderPath(PosixPath):
    """An output given with a trailing '/' (which ``Path`` drops): a folder, whether or
    not it exists yet. ``replay --out`` writes its results in it; elsewhere a folder is
    refused as a file name."""


def into_folder(out: Path) -> bool:
    """Whether ``replay --out`` names a folder to make the results' name in (given with a
    '/', or one that exists)."""
    return isinstance(out, FolderPath) or out.is_dir()


def is_stdout(path: Path | None) -> bool:
    return path is not None and path == STDOUT


def write_output(path: Path, text: str) -> None:
    """``text`` to stdout for ``-``, else to ``path`` whole (0600, ``write_whole``).
    Raises OSError."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from tailreplay.private import write_whole

    write_whole(path, text)


def check_output_file(flag: str, path: Path, *, inputs: Iterable[Path] = ()) -> None:
    """Refuse an output whose folder is missing, which is a folder, or which is an input.

    >>> check_output_file("-o", Path("out.msgpack"), inputs=[Path("in.msgpack")])
    """
    if is_stdout(path):
        if flag != "--json":  # a file named "-" is what a user meaning stdout would get
            raise UsageError(f"{flag} -: only --json writes to stdout; give a file name")
        return
    if isinstance(path, FolderPath):
        raise UsageError(f"{flag} {path}/: names a folder; give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: no such directory {path.parent}")
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")
    if path.exists() and any(p.exists() and os.path.samefile(p, path) for p in inputs):
        raise UsageError(f"{path}: the output is also an input; choose another {flag}")
