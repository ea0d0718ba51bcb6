"""Folders given where archives are: the archives inside, in the order the proxy
wrote them.

The proxy writes a rotating series into a folder, each file named
``<prefix>-<UTC start>-<host>-<pid>-<seq>.msgpack[.zst]``
(``format.rotated_name``): by name is by start time, then by writer and sequence.
Anything else in the folder (a note, a report, a sub-folder) is not an archive
and is left alone; a folder with no archive in it is an error, not an empty run.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tailreplay.declared import PathKind, Setting
from tailreplay.errors import InputError

__all__ = ["ARCHIVES", "ARCHIVE_SUFFIXES", "expand_folders"]

ARCHIVE_SUFFIXES = (".msgpack", ".msgpack.zst")


def expand_folders(paths: Iterable[Path]) -> list[Path]:
    """``paths`` with each folder replaced by the archives directly inside it, by name."""
    out: list[Path] = []
    for path in paths:
        if not path.is_dir():
            out.append(path)
            continue
        try:
            inside = sorted(
                p
                for p in path.iterdir()
                if p.name.endswith(ARCHIVE_SUFFIXES) and not p.name.startswith(".") and p.is_file()
            )
        except OSError as exc:
            raise InputError(f"{path}: cannot list the folder ({exc.strerror or exc})") from exc
        if not inside:
            raise InputError(
                f"{path}: a folder with no archive in it (*{', *'.join(ARCHIVE_SUFFIXES)})"
            )
        out.extend(inside)
    return out


ARCHIVES: Setting[None] = Setting(
    "archives",
    None,
    kind=PathKind(),
    argument=True,
    multiple=True,
    required=True,
    finish=lambda paths: tuple(expand_folders(paths)),
)
"""The archives a command reads (one or more; a folder reads as the archives in it)."""
