"""A study's output folder (``capacity``, ``traces validate-model``) has one run
writing in it, and a previous run's outputs are never replaced unasked.

The folder is made 0700 if missing and locked (``flock`` on ``.lock`` inside it)
for the run: a second study given the same folder is refused at its start, as a
second replay given the same result file is (``result_file.py``). A folder that
already holds files is refused unless ``overwrite`` (``--overwrite``): a study's
trials and windows have fixed names, and a rerun would replace the last run's
evidence file by file, leaving a mix of the two.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from tailreplay.declared import Setting
from tailreplay.errors import UsageError

__all__ = ["LOCK_NAME", "OVERWRITE", "check_folder", "claimed_folder"]

OVERWRITE: Setting[bool] = Setting(
    "--overwrite",
    False,
    "Replace a previous run's files in --out-dir (else such a folder is refused).",
    is_flag=True,
)
"""What ``check_folder``'s ``overwrite`` is on the command line of every study that
writes in an ``--out-dir`` (``capacity``, ``validate-model``)."""

LOCK_NAME = ".lock"


def check_folder(path: Path, *, overwrite: bool, flag: str = "--out-dir") -> None:
    """Make ``path`` (0700) and refuse it when it holds a previous run's files and
    ``overwrite`` is off (``UsageError``, exit 2)."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        held = sorted(p.name for p in path.iterdir() if p.name != LOCK_NAME)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None
    if held and not overwrite:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        raise UsageError(
            f"{flag} {path} holds a previous run's files ({shown}); pass --overwrite "
            "to replace them, or give another folder"
        )


@contextlib.contextmanager
def claimed_folder(path: Path, *, overwrite: bool, flag: str = "--out-dir") -> Iterator[Path]:
    """``path`` checked (``check_folder``) and held for this run until the block ends;
    another run holding it is refused (``UsageError``)."""
    check_folder(path, overwrite=True, flag=flag)  # made; its contents judged once locked
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"{flag} {path}: another run is writing there; give each run its own folder"
            ) from None
        check_folder(path, overwrite=overwrite, flag=flag)
        yield path
    finally:
        os.close(fd)  # the lock goes with it
