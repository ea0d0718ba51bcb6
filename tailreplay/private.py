"""Files that hold captured traffic or its summaries are created mode 0600."""

from __future__ import annotations

import os
from typing import IO, Any

__all__ = ["open_private"]


def open_private(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> IO[Any]:
    """Create (or truncate) ``path`` with mode 0600, whatever the umask or its old mode.

    >>> with open_private("summary.json") as f: f.write("{}")
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise
