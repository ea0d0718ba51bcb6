"""One replay run as a child process, for the commands that run many of them
(``traces validate-model``, ``capacity``): each trial is ``tailreplay replay`` exactly
as a user would run it, with its own clock and its own result archive."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tailreplay.child_stop import stop_child
from tailreplay.errors import NotMeasured
from tailreplay.studies.replay_args import ReplayArgs
from tailreplay.traces.archive.columns import load_columns

__all__ = ["SIM_SLOW_LIMIT", "STOP_S", "longest_request", "replay_child", "sim_slowdown"]

STOP_S = 1.0
"""How long an interrupted study gives its child replay to stop before killing it: the
study's own stop (``capacity`` exits within 2 s of SIGTERM) waits for it."""

SIM_SLOW_LIMIT = 0.05
"""A built-in simulator whose steps took this much longer than its model, summed over a
replay, served slower than the engine it models: its own CPU (a busy machine, or step
times divided by a high ``--speed``) was the limit, and what the replay measured is that."""


def replay_child(args: ReplayArgs, ok: tuple[int, ...] = (0,)) -> None:
    """``tailreplay replay`` with ``args``, writing ``args.out``; its summary is dropped.
    An exit code not in ``ok`` raises ``NotMeasured`` with the replay's own ``Error:``
    line (exit 1 is a replay that missed its SLO, exit 5 one whose requests all failed:
    with ``fail_fast=0`` it runs to the end), e.g.
    ``replay_child(ReplayArgs(archives=(window,), target=URL(url), out=out, fail_fast=0))``.
    """
    if args.out is None:
        raise ValueError("a child replay's results are read from args.out: set it")
    out, name = args.out, ", ".join(p.name for p in args.archives)
    out.unlink(missing_ok=True)
    code, stderr = _run(args)
    if code == 130:
        raise KeyboardInterrupt
    if code not in ok or not out.exists():
        raise NotMeasured(f"the replay of {name} failed (exit {code}): {_why(stderr)}")
    if code != 0 and not load_columns([out], ["start_ns"]).n:
        # A replay that ran and failed, unless it sent nothing: then the target failed
        # its preflight (down, wrong), and no trial measures anything.
        raise NotMeasured(f"the replay of {name} sent nothing: {_why(stderr)}")


def _run(args: ReplayArgs) -> tuple[int, str]:
    """The child replay to its end: its exit code and stderr. Interrupted (Ctrl-C, or
    SIGTERM taken as one), it is stopped within ``STOP_S`` before the interrupt goes on:
    asked twice, so it cancels what is in flight and writes its results at once."""
    cmd = [sys.executable, "-m", "tailreplay", "replay", *args.to_argv()]
    # stderr to a file, not a pipe: a chatty replay never blocks on it, and waiting for
    # the child is all an interrupt has to break out of.
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            code = child.wait()
        except BaseException:
            stop_child(child, grace_s=STOP_S, again_after_s=0.1)
            raise
        err.seek(0)
        return code, err.read()


def _why(stderr: str) -> str:
    """The replay's own ``Error:`` line (else its last line)."""
    lines = stderr.strip().splitlines()
    last = lines[-1] if lines else "no output"
    return next((x for x in reversed(lines) if x.startswith("Error:")), last).removeprefix(
        "Error: "
    )


def longest_request(archives: list[Path]) -> int:
    """The most input + output tokens of one request in any of ``archives``."""
    longest = 0
    for path in archives:
        cols = load_columns([path], ["input_tokens", "output_tokens"])
        both = cols.present["input_tokens"] & cols.present["output_tokens"]
        if both.any():
            total = cols["input_tokens"][both] + cols["output_tokens"][both]
            longest = max(longest, int(total.max()))
    return longest


def sim_slowdown(url: str) -> float | None:
    """How much longer than modelled the built-in simulator at ``url`` took over its
    steps so far (0.1: 10%), from its own metrics; None from a target that is not one."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=5) as answer:
            text = answer.read().decode("utf-8", "replace")
        sums: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:  # one per model name: summed
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    except (OSError, ValueError, urllib.error.URLError):
        return None
    modelled = sums.get("tailreplay_sim_step_modelled_seconds_total")
    achieved = sums.get("tailreplay_sim_step_achieved_seconds_total")
    if not modelled or achieved is None:
        return None
    return achieved / modelled - 1
