"""The replay's result archive when ``--out`` is not given, or names a folder:
``replays/replay-<UTC second>[-dry][-N].msgpack`` (or in that folder), created
exclusively, so runs started in the same second never write one file."""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path

from tailreplay.errors import InputError

__all__ = ["default_result", "drop_if_empty", "reserve"]


def default_result(dry_run: bool, folder: Path | None = None) -> Path:
    """The name for now, in ``folder`` (default ./replays/, created by ``reserve``)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return (folder or Path("replays")) / f"replay-{stamp}{'-dry' if dry_run else ''}.msgpack"


def reserve(path: Path) -> Path:
    """``path``, or ``NAME-2``, ``NAME-3``... if taken, created empty (0600) and
    exclusively, in its folder (created 0700, as the proxy's captures folder is)."""
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{path.parent}: cannot write ({exc.strerror or exc})") from None
    for n in range(1, 1000):
        name = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            continue
        except OSError as exc:
            raise InputError(f"{name}: cannot write ({exc.strerror or exc})") from None
        return name
    raise InputError(f"{path.parent}: 999 replays named {path.stem}-N already; use --out")


def drop_if_empty(path: Path) -> None:
    """Remove a reserved file the run never wrote (it was refused first), and the
    default folder if that leaves it empty: a refused run leaves nothing behind."""
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()
            if path.parent.name == "replays":
                path.parent.rmdir()  # only when empty: another run's results stay
