"""``traces upgrade``: an archive of any version this tailreplay reads, rewritten in the
current one (with checksums: ``traces/archive/checksums.py``).

Records go across unchanged and in the order they are stored (through
``format.UPGRADES`` when their version changed them); the header keeps its fields
but for ``version``, ``tool_version`` and ``created_ns`` (the new file's own), and
names the version it came from in ``upgraded_from``. The output is written beside
its name and renamed into place at the end (``write_archive``), mode 0600.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tailreplay.errors import InputError
from tailreplay.output_path import check_output_file
from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.format import VERSION
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.version import __version__

__all__ = ["Upgraded", "upgrade_archive"]


@dataclass
class Upgraded:
    written: int
    from_version: int
    warnings: list[str] = field(default_factory=list)


def upgrade_archive(
    src: str | os.PathLike[str], out: str | os.PathLike[str], *, skip_corrupt: bool = False
) -> Upgraded:
    """Rewrite the archive ``src`` as ``out`` in the current format version.

    >>> upgrade_archive("old.msgpack", "new.msgpack").from_version
    1
    """
    in_path, out_path = Path(src), Path(out)
    check_output_file("-o", out_path, inputs=[in_path])
    reader = ArchiveReader([in_path], skip_corrupt=skip_corrupt, order="file", shadows="keep")
    header = dict(reader.headers[0])
    if not header:
        raise InputError(f"{in_path}: empty file: no header to upgrade, no records")
    version = header["version"]
    header.update(tool_version=__version__, version=VERSION)
    if version != VERSION:
        header["upgraded_from"] = version
    written = write_archive(out_path, header, reader.iter_maps(), checked=True)
    return Upgraded(written, version, reader.warnings())
