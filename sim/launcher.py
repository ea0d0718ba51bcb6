"""Start the simulator in a child process and hand back its URL.

``replay`` without ``--target`` and the integration tests use this, so the
simulator never shares the caller's event loop (or, on a 2-core machine, its core).
The child listens on a free port and prints its URL as its first line.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tailreplay.errors import RunFailed

__all__ = ["READY_PREFIX", "sim_process"]

READY_PREFIX = "tailreplay sim listening on "


@contextmanager
def sim_process(args: Sequence[str] = (), *, timeout_s: float = 30.0) -> Iterator[str]:
    """Run ``tailreplay sim ARGS`` on 127.0.0.1 and a free port; yields its base URL.

    >>> with sim_process(["--profile", "fast", "--seed", "3"]) as url: ...
    """
    cmd = [sys.executable, "-m", "tailreplay.sim", "--listen", "127.0.0.1:0", *args]
    # A session of its own: Ctrl-C at a terminal reaches the whole process group, and the
    # parent, not the simulator, decides what it means (it stops the simulator, below).
    child = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert child.stdout is not None
        line = _read_line(child, timeout_s)
        if not line.startswith(READY_PREFIX):
            err = child.stderr.read() if child.stderr and child.poll() is not None else ""
            raise RunFailed(f"the simulator did not start: {(line + err).strip()[-500:]}")
        yield line[len(READY_PREFIX) :].strip()
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _read_line(child: subprocess.Popen[str], timeout_s: float) -> str:
    import threading

    box: list[str] = []
    assert child.stdout is not None
    reader = threading.Thread(target=lambda: box.append(child.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    if not box:
        raise RunFailed(f"the simulator did not start within {timeout_s:.0f} s")
    return box[0]
