"""How every command ends: library errors and wrong flags as one line and an exit code.

Used by the ``tailreplay`` group and by ``replay``, which is also a console script
of its own (so that its usage line says ``replay``, not ``replay replay``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import click

from tailreplay.errors import EXIT_INPUT, TailreplayError
from tailreplay.printable import printable

__all__ = ["ARGV", "HandledGroup", "run_standalone", "setup_logging", "sigterm_interrupts"]

log = logging.getLogger("tailreplay")


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="warning: %(message)s" if not verbose else "%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block SIGTERM stops the command as Ctrl-C does: a ``KeyboardInterrupt``,
    which the command's child processes are stopped by (``tailreplay/child_stop.py``),
    its partial outputs removed by, and which ends it with exit 130. Python's default
    would end it at once (143), leaving its children running and a ``.part`` file
    behind. Every command runs within it; one on an event loop (a replay, the servers)
    takes SIGTERM on the loop while the loop runs."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread takes signals (a command run from a thread: tests)
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _handled(ctx: click.Context, invoke: Callable[[click.Context], Any]) -> Any:
    try:
        return invoke(ctx)
    except TailreplayError as exc:
        _error(str(exc))
        ctx.exit(exc.exit_code)
    except click.UsageError as exc:  # click's own checks (ranges, choices, unknown flags)
        where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
        _error(f"{exc.format_message()} (see '{where} --help')")
        ctx.exit(exc.exit_code)
    except KeyboardInterrupt:  # before a command could take Ctrl-C over (click says "Aborted!")
        click.echo("interrupted", err=True)
        ctx.exit(130)
    except BrokenPipeError:
        _reader_gone()
    except OSError as exc:
        _error(_file_error(exc))
        ctx.exit(EXIT_INPUT)


def _error(message: str) -> None:
    """The one line a failed command ends with. Its message may hold a file name or a
    target's words: shown escaped (``printable``), so it stays one line."""
    click.echo(f"Error: {printable(message)}", err=True)


EXIT_PIPE = 128 + signal.SIGPIPE
"""141: what a shell reports for a command killed by SIGPIPE, as ``cat`` would be."""


def _reader_gone() -> NoReturn:
    """stdout's reader stopped reading (``| head``): not the command's failure, and
    nothing more to say. Exit as a command killed by SIGPIPE does, writing nothing
    more to the pipe (Python's exit would flush into it again)."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(EXIT_PIPE)


def _file_error(exc: OSError) -> str:
    """A file no command's own check caught (an output refused by the file system, a
    full disk, a path gone): one line, as unreadable input is; with -v, the traceback
    too. What was written before it stays written."""
    log.debug("file error", exc_info=exc)
    where = f"{exc.filename}: " if exc.filename is not None else ""
    return f"{where}{exc.strerror or exc}"


ARGV = "tailreplay.argv"
"""``ctx.meta`` key of the command line as given (program name first): what a result's
header records (``command_line.py``); absent when a command runs on its own."""


class HandledGroup(click.Group):
    """A group whose commands end as ``_handled`` says."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        given = [info_name or self.name or "", *args]  # parsing consumes ``args``
        ctx = super().make_context(info_name, args, parent, **extra)
        ctx.meta[ARGV] = given
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        with sigterm_interrupts():
            return _handled(ctx, super().invoke)


def run_standalone(command: click.Command, args: list[str], prog_name: str) -> NoReturn:
    """Run ``command`` as a script of its own, ending as ``_handled`` says (parsing its
    options included, which a group would do inside its own ``invoke``)."""
    try:
        with sigterm_interrupts():
            code = command.main(args, prog_name, standalone_mode=False)
    except TailreplayError as exc:
        _error(str(exc))
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # wrong flags and values
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else prog_name
        _error(f"{exc.format_message()} (see '{where} --help')")
        sys.exit(exc.exit_code)
    except click.Abort:  # Ctrl-C before the command could take it over
        click.echo("interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        _reader_gone()
    except OSError as exc:
        _error(_file_error(exc))
        sys.exit(EXIT_INPUT)
    sys.exit(code if isinstance(code, int) else 0)
