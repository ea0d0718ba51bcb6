"""Stopping a child process within a bound: asked first (SIGTERM, so it can write what
it holds), killed once the bound is spent. What runs children (the built-in
simulator's launcher, the studies' child replays) stops them this way when it is
itself being stopped, so a Ctrl-C or SIGTERM leaves no process behind it."""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Any

__all__ = ["stop_child"]


def stop_child(
    child: subprocess.Popen[Any], *, grace_s: float, again_after_s: float | None = None
) -> None:
    """SIGTERM ``child``, wait up to ``grace_s`` for it to exit, then SIGKILL it; returns
    once it has exited (reaped). ``again_after_s``: a second SIGTERM that long after the
    first, for a child that takes a second signal as "now" (``replay`` cancels what is
    in flight then, instead of waiting for it). An interrupt while waiting still kills it.

    >>> stop_child(proc, grace_s=1.0, again_after_s=0.1)
    """
    if child.poll() is not None:
        return
    deadline = time.monotonic() + grace_s
    try:
        child.send_signal(signal.SIGTERM)
        if again_after_s is not None and _exited(child, min(again_after_s, grace_s)):
            return
        if again_after_s is not None:
            child.send_signal(signal.SIGTERM)
        _exited(child, deadline - time.monotonic())
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _exited(child: subprocess.Popen[Any], within_s: float) -> bool:
    try:
        child.wait(timeout=max(within_s, 0.0))
    except subprocess.TimeoutExpired:
        return False
    return True
