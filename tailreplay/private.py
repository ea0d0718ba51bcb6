"""Files that hold captured traffic or its summaries are created mode 0600.

An output path is opened without following a symbolic link and refused when it is
not a plain file of its own (a hard link, a FIFO, a device): a proxy run as root
with a shared output folder must not be steered into truncating, or changing the
mode of, some other file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tailreplay.errors import UsageError

__all__ = ["open_private", "refuse_unless_own_file", "replaced_whole", "write_whole"]


def open_private(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> IO[Any]:
    """Create (or truncate) ``path`` with mode 0600, whatever the umask or its old mode.

    >>> with open_private("summary.json") as f: f.write("{}")
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{path}: is a symbolic link; refusing to write through it") from None
        if exc.errno == errno.ENXIO:
            raise UsageError(f"{path}: is a FIFO or socket, not a file") from None
        raise
    try:
        refuse_unless_own_file(path, os.fstat(fd))
        # Truncated only now, after the checks: a file refused is left as it was.
        os.ftruncate(fd, 0)
        os.fchmod(fd, 0o600)
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def write_whole(path: str | os.PathLike[str], text: str | bytes) -> None:
    """``text`` to ``path`` (0600), whole or not at all: written beside it and renamed
    over it, so a full disk or a crash leaves the previous file, never a torn one.
    Raises OSError (the partial file removed)."""
    with (
        replaced_whole(path) as part,
        open_private(part, "wb" if isinstance(text, bytes) else "w") as f,
    ):
        f.write(text)


@contextlib.contextmanager
def replaced_whole(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A path beside ``path`` to write a file to: renamed over ``path`` when the block
    ends, removed when it raises. So an output is the whole of what was written, or
    what was there before (nothing, or the previous file), never a part.

    >>> with replaced_whole("out.jsonl") as part, open_private(part) as f: f.write(text)
    """
    target = Path(path)
    _check_replaceable(target)
    part = target.with_name(f".{target.name}.part")
    try:
        yield part
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def _check_replaceable(target: Path) -> None:
    """What ``open_private`` refuses to write into, a rename must not replace either: a
    symbolic link, a device, a FIFO or socket, a file with other hard links (as root,
    ``--json /dev/null`` would have made /dev/null a plain file)."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{target}: is a symbolic link; refusing to write through it")
    refuse_unless_own_file(target, st)


def refuse_unless_own_file(path: str | os.PathLike[str], st: os.stat_result) -> None:
    """A plain file with no other hard link, or one line saying what it is instead."""
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        kind = "has other hard links" if stat.S_ISREG(st.st_mode) else "is not a plain file"
        raise UsageError(f"{path}: {kind}; refusing to overwrite it")
