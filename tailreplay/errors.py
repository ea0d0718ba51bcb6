"""The error tree: every failure a user can cause maps to one class and one exit code.

Inside a run, failures are data (a record with ``error`` set); these exceptions are
for the edges — bad files, bad options — where the CLI turns them into one line on
stderr and the documented exit code (README, "Exit codes"): 1 an SLO missed (a run that
did not meet its goal), 2 usage, 3 unreadable input, 4 a verdict not judged, 5 a target
that could not be measured.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_NOT_JUDGED",
    "EXIT_NOT_MEASURED",
    "EXIT_USAGE",
    "ArchiveCorrupt",
    "ArchiveError",
    "ArchiveVersionError",
    "InputError",
    "NotAnArchive",
    "NotJudged",
    "NotMeasured",
    "RunFailed",
    "TailreplayError",
    "UsageError",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_NOT_JUDGED = 4
EXIT_NOT_MEASURED = 5


class TailreplayError(Exception):
    """Base of every error the CLI reports as one line."""

    exit_code = EXIT_FAILED


class UsageError(TailreplayError):
    """A wrong flag or option value."""

    exit_code = EXIT_USAGE


class RunFailed(TailreplayError):
    """A run that measured its target, which did not meet the goal (an SLO, a capacity)."""

    exit_code = EXIT_FAILED


class NotJudged(TailreplayError):
    """A run whose measurement cannot be judged: the client, not the target, was the
    bottleneck, or nothing was left to judge. Not a pass, and not the target's fail."""

    exit_code = EXIT_NOT_JUDGED


class NotMeasured(TailreplayError):
    """A run that could not measure its target: the preflight refused it, ``--fail-fast``
    stopped it, nothing sent was answered, or what it needs did not start."""

    exit_code = EXIT_NOT_MEASURED


class InputError(TailreplayError):
    """An input that cannot be read: missing, a directory, unreadable."""

    exit_code = EXIT_INPUT


class ArchiveError(InputError):
    """Something is wrong with an archive file; the message names the file."""


class NotAnArchive(ArchiveError):
    """The file does not start with a tailreplay header."""


class ArchiveVersionError(ArchiveError):
    """The archive was written by a newer tailreplay, or by a version with no upgrade path."""


class ArchiveCorrupt(ArchiveError):
    """Damage in the middle of an archive (not a torn final record)."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(
            f"{path}: corrupt archive at byte offset {offset} ({reason}); "
            "use --skip-corrupt to recover the records after it"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its parts (it crosses from a --workers process to the parent),
        # keeping a message the parent may have prefixed.
        return (_rebuild_corrupt, (self.path, self.offset, self.reason, self.args))


def _rebuild_corrupt(path: str, offset: int, reason: str, args: tuple[Any, ...]) -> ArchiveCorrupt:
    error = ArchiveCorrupt(path, offset, reason)
    error.args = args
    return error
