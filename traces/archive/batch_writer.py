"""write_archive: a whole archive from a batch tool, waiting for the disk and renamed into place.

The proxy's writer drops rather than wait; a batch tool (merge, import, fit, synth)
must lose nothing, so it blocks on a full queue and turns a failed write into one
``InputError``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tailreplay.errors import InputError
from tailreplay.private import replaced_whole
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.writer import ArchiveWriter

__all__ = ["write_archive"]


def write_archive(
    path: str | os.PathLike[str],
    header: dict[str, Any],
    records: Iterable[Record | dict[str, Any]],
    *,
    checked: bool = False,
    accept: Callable[[int], None] | None = None,
) -> int:
    """Write ``records`` to a new archive at ``path`` for a batch tool; returns how many.

    It waits for the disk rather than drop (a dropped record would be lost data) and
    turns a failed write into one ``InputError``. The archive is written beside
    ``path`` and renamed into place at the end: a failure (a full disk, bad input
    met half-way, Ctrl-C) leaves no archive, or the one that was there, never a part
    that reads as whole. ``checked``: the records were read from an archive or
    checked already, so the writer does not check them again. ``accept`` is called
    with the count before the rename: what it raises keeps the archive from ``path``.

    >>> write_archive("out.msgpack", make_header("merge", ordered=True), records)
    """
    compress = Path(path).suffix == ".zst"  # the name written to ends in .part
    with replaced_whole(path) as part:
        writer = ArchiveWriter(
            part,
            header=header,
            block_when_full=True,
            check=not checked,
            compress=compress,
            shown_as=path,
        )
        written = 0
        try:
            for record in records:
                writer.append(record)
                written += 1
        finally:
            writer.close()
        if writer.error is not None:
            raise InputError(f"{path}: write failed: {writer.error}")
        written -= writer.stats.dropped
        if accept is not None:
            accept(written)
    return written
