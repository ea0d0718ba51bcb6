"""A replay's result archive has one writer, and an existing one is never replaced
unasked.

The file is created exclusively (``O_EXCL``, 0600) and locked (``flock``) until the
run ends, so a second replay given the same name is refused at its start, whatever
the two runs' timing. ``overwrite`` (``replay --overwrite``) replaces an existing
result, but never one another replay holds. Without ``--out`` the name is made here,
``replays/replay-<UTC second>[-dry][-N].msgpack``: runs started in the same second
take the next free ``-N``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from tailreplay.errors import InputError, UsageError
from tailreplay.output_path import check_output_file
from tailreplay.private import refuse_unless_own_file

__all__ = ["claimed", "default_result"]

_MOST_NUMBERED = 999
"""Default names tried in one second (``NAME-2`` ... ``NAME-999``)."""


def default_result(dry_run: bool, folder: Path | None = None) -> Path:
    """The name for now, in ``folder`` (default ./replays/, created by ``claimed``)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return (folder or Path("replays")) / f"replay-{stamp}{'-dry' if dry_run else ''}.msgpack"


@contextlib.contextmanager
def claimed(
    path: Path,
    *,
    overwrite: bool = False,
    numbered: bool = False,
    inputs: Iterable[Path] = (),
    flag: str = "--out",
) -> Iterator[Path]:
    """``path`` held for one run's results: created exclusively and locked until the
    block ends. ``numbered``: a name made here, so the first free of ``path``,
    ``NAME-2``, ... in its folder (made 0700 if missing, as the proxy's captures folder
    is). ``overwrite``: an existing file is taken as it is (truncated only when the
    run writes it), unless another run holds it. A block that raises before anything
    was written leaves no empty file it created. Raises ``UsageError`` (exit 2).

    >>> with claimed(Path("r.msgpack")) as out: run(out)
    """
    if numbered:
        fd, name = _numbered(path)
        created = True
    else:
        check_output_file(flag, path, inputs=inputs)  # no folder, a folder, an input
        fd, created = _named(path, overwrite, flag)
        name = path
    try:
        yield name
    except BaseException:
        if created:
            _drop_if_empty(name, numbered)
        raise
    finally:
        os.close(fd)  # the lock goes with it


def _named(path: Path, overwrite: bool, flag: str) -> tuple[int, bool]:
    """The locked descriptor of ``path``, and whether this call created it."""
    try:
        fd = _create(path)
    except FileExistsError:
        if not overwrite:
            if _held(path):
                raise _busy(path, flag) from None
            raise UsageError(
                f"{flag} {path}: exists; give another name, or --overwrite to replace it"
            ) from None
        fd = _open_existing(path)
        if not _lock(fd):
            os.close(fd)
            raise _busy(path, flag) from None
        return fd, False
    if not _lock(fd):  # an --overwrite run opened it between our create and our lock
        os.close(fd)
        raise _busy(path, flag)
    return fd, True


def _numbered(path: Path) -> tuple[int, Path]:
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{path.parent}: cannot write ({exc.strerror or exc})") from None
    for n in range(1, _MOST_NUMBERED + 1):
        name = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        try:
            fd = _create(name)
        except FileExistsError:
            continue
        if _lock(fd):
            return fd, name
        os.close(fd)  # taken by an --overwrite run that named it: the next one
    raise InputError(f"{path.parent}: 999 replays named {path.stem}-N already; use --out")


def _create(path: Path) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except FileExistsError:
        raise
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _open_existing(path: Path) -> int:
    """An existing result, opened to lock it: not through a symbolic link, and only a
    plain file of its own (``tailreplay/private.py``); its bytes are left as they are."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{path}: is a symbolic link; refusing to write through it") from None
        raise InputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        refuse_unless_own_file(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _held(path: Path) -> bool:
    """Whether another run holds ``path`` now (it is writing its results there)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _busy(path: Path, flag: str) -> UsageError:
    return UsageError(f"{flag} {path}: another replay is writing it; give another name")


def _drop_if_empty(path: Path, numbered: bool) -> None:
    """Remove a file the run created and never wrote (it was refused first), and the
    default folder if that leaves it empty: a refused run leaves nothing behind."""
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()
            if numbered and path.parent.name == "replays":
                path.parent.rmdir()  # only when empty: another run's results stay
