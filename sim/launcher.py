"""Start the simulator in a child process and hand back its URL.

``replay`` without ``--target`` (through ``BuiltinSim``, which sizes the simulator
to the trace) and the integration tests use this, so the simulator never shares the
caller's event loop (or, on a 2-core machine, its core). The child listens on a free
port and prints its URL as its first line.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from tailreplay.child_stop import stop_child
from tailreplay.errors import NotMeasured
from tailreplay.sim.profiles import DEFAULT_PROFILE, EngineProfile, fit_context, profile
from tailreplay.traces.archive.record import PREFIX_BLOCK_TOKENS

__all__ = ["READY_PREFIX", "BuiltinSim", "sim_process"]

READY_PREFIX = "tailreplay sim listening on "
_STOP_S = 10.0
"""How long a simulator gets to finish the answers it is streaming at the end of a run."""
_STOP_NOW_S = 0.5
"""How long it gets when its caller is failing or being stopped."""


@contextmanager
def sim_process(args: Sequence[str] = (), *, timeout_s: float = 30.0) -> Iterator[str]:
    """Run ``tailreplay sim ARGS`` on 127.0.0.1 and a free port; yields its base URL.

    >>> with sim_process(["--profile", "fast", "--seed", "3"]) as url: ...
    """
    # It stops by itself if this process dies without stopping it (SIGKILL).
    cmd = [
        sys.executable,
        "-m",
        "tailreplay.sim",
        "--listen",
        "127.0.0.1:0",
        "--exit-with-parent",
        str(os.getpid()),
        *args,
    ]
    # A session of its own: Ctrl-C at a terminal reaches the whole process group, and the
    # parent, not the simulator, decides what it means (it stops the simulator, below).
    child = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert child.stdout is not None
        line = _read_line(child, timeout_s)
        if not line.startswith(READY_PREFIX):
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)  # its stdout closed: let it exit, so its reason is read
            err = child.stderr.read() if child.stderr and child.poll() is not None else ""
            raise NotMeasured(f"the simulator did not start: {(line + err).strip()[-500:]}")
        yield line[len(READY_PREFIX) :].strip()
    except BaseException:
        # The caller is failing or being stopped (Ctrl-C, SIGTERM): a simulator has
        # nothing to keep, and whoever stops the caller waits for it.
        stop_child(child, grace_s=_STOP_NOW_S)
        raise
    stop_child(child, grace_s=_STOP_S)


def _read_line(child: subprocess.Popen[str], timeout_s: float) -> str:
    import threading

    box: list[str] = []
    assert child.stdout is not None
    reader = threading.Thread(target=lambda: box.append(child.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    if not box:
        raise NotMeasured(f"the simulator did not start within {timeout_s:.0f} s")
    return box[0]


@dataclass(frozen=True)
class BuiltinSim:
    """``replay``'s built-in target: ``tailreplay sim`` with its context and KV budget sized
    to the trace's longest request (``sim.profiles.fit_context``).

    ``sim_args`` (replay's ``--sim-arg``) come last on the simulator's command line, so
    they win over the sizing; ``overrides`` holds the profile fields they set, parsed.
    Picklable, for ``replay --workers``.
    """

    profile: str = DEFAULT_PROFILE
    seed: int = 0
    sim_args: tuple[str, ...] = ()
    overrides: tuple[tuple[str, Any], ...] = ()
    nice: int = 5
    """The replayer's timing comes first on a busy machine: the simulator runs niced."""

    def sized(self, longest: int | None) -> EngineProfile:
        """The profile the simulator will run for a trace whose longest request is
        ``longest`` tokens (input + output budget)."""
        given = dict(self.overrides)
        return fit_context(
            profile(self.profile).with_overrides(**given), longest, keep=given.keys()
        )

    def describe(self, longest: int | None) -> str:
        """One line's worth: the profile and the size chosen, and why."""
        p, given = self.sized(longest), dict(self.overrides)
        sizes = [
            f"{what} {value:,} tokens{' (--sim-arg)' if name in given else ''}"
            for what, name, value in (
                ("context", "max_model_len", p.max_model_len),
                ("KV cache", "kv_tokens", p.kv_tokens),
            )
        ]
        why = "" if longest is None else f"; the longest request is {longest:,} tokens"
        return f"profile {self.profile}, {', '.join(sizes)}{why}"

    def serve_offline(
        self,
        longest: int | None,
        asks: Iterator[tuple[Any, tuple[float, int, int | None, list[int], int]]],
        emit: Callable[[list[tuple[Any, tuple[int, list[float], int | None, str]]]], None],
        stop: threading.Event,
    ) -> None:
        """The engine of ``sized(longest)`` serving ``asks`` on a virtual clock
        (``sim/offline_engine.py``); the replayer's side of it is ``replayer/builtin.py``."""
        from tailreplay.sim.offline_engine import OfflineRequest, block_chain, serve_offline
        from tailreplay.sim.output import natural_length

        p = self.sized(longest)
        per_shared = max(PREFIX_BLOCK_TOKENS // p.block_size, 1)
        draws = random.Random(self.seed)

        def requests() -> Iterator[tuple[Any, OfflineRequest]]:
            for key, (due_s, prompt, output, shared, own) in asks:
                if output is None:  # as the simulator draws an unforced length
                    output = min(natural_length(p, draws), max(1, p.max_model_len - prompt))
                blocks = block_chain(shared, prompt, p.block_size, own, per_shared)
                yield key, OfflineRequest(due_s, prompt, output, blocks)

        def answers(batch: list[tuple[Any, Any]]) -> None:
            emit([(k, (a.status, a.token_s, a.cached_tokens, a.error_text)) for k, a in batch])

        serve_offline(p, requests(), answers, stop)

    def start(self, longest: int | None) -> AbstractContextManager[str]:
        """Start it sized for ``longest``; the context manager yields its base URL."""
        p = self.sized(longest)
        return sim_process(
            (
                "--profile",
                self.profile,
                "--seed",
                str(self.seed),
                "--nice",
                str(self.nice),
                "--max-model-len",
                str(p.max_model_len),
                "--kv-tokens",
                str(p.kv_tokens),
                *self.sim_args,
            )
        )
