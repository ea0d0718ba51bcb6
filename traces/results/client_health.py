"""A replay's verdict on its own health: was the client fast enough to measure the target?

A replay reproduces the recorded arrival process only while it sends on time.
When the replaying machine is short of CPU, requests leave late: the target
sees a different (smoother, later) load than production's, and every figure then
describes the client as much as the target. When the dispatch lag P99 exceeds the
run's limit (``--lag-limit``, default 5 ms) the run is ``client_bound``: the
replay's summary, ``report`` and its SLO gate say so instead of presenting the
figures as the target's. The replayer adds what it saw of its event loop and CPU,
and of the CPU it was denied (replayer/health.py): when the run was client-bound the
warning names the likeliest cause, since the cure differs (a busy replay wants
--workers; one queued behind other processes wants its own cores; one the
hypervisor stole from wants another machine or time).
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from tailreplay.declared import Setting
from tailreplay.option_values import DURATION

__all__ = [
    "DEFAULT_LAG_LIMIT_MS",
    "LAG_LIMIT",
    "STEAL_NOTED",
    "WAIT_NOTED",
    "ClientVerdict",
    "client_verdict",
    "verdict_line",
]

LAG_LIMIT: Setting[str] = Setting(
    "--lag-limit",
    "5ms",
    "Dispatch lag P99 above this means the client, not the target, was the limit: "
    "the run says so and an SLO gate is not judged.",
    kind=DURATION,
    show_default=True,
)
"""``--lag-limit`` of ``replay`` and ``capacity`` (with its own help)."""
DEFAULT_LAG_LIMIT_MS = LAG_LIMIT.value() * 1000
"""A result archive without its run's limit is judged by the default one."""
STEAL_NOTED = 0.005
"""Steal worth naming: on a 2-vCPU guest, 1.2% of the machine's CPU stolen during a 5 s
replay at 1,000/s took its lag P99 from under 0.2 ms to 5.7 ms (docs/benchmarks.md)."""
WAIT_NOTED = 0.05
"""Run-queue wait worth naming: 5% of the run's wall time. The dispatcher yields busily
for the last tens of microseconds before each send (longer while wake-ups come late),
and a thread that spins waits its turn whenever another wants the CPU, so a healthy
replay beside its responder waits a few percent."""
SATURATED = 0.9
"""A replay process this busy with its requests (CPU over the dispatch's wall time, its
busy wait until due times left out) is the cause itself."""


class ClientVerdict(TypedDict):
    lag_p99_ms: float | None
    lag_limit_ms: float
    loop_stalls: int | None
    """Times the event loop was blocked 50 ms or more (None: not watched, e.g. a merge)."""
    worst_stall_ms: float | None
    cpu_share: float | None
    """The replayer process's CPU time over wall time (1.0: a whole core)."""
    cpu_busy_share: float | None
    """...less its busy wait until due times: the CPU its requests took, which is what
    saturates a replay."""
    cpu_wait_share: float | None
    """The dispatching thread's time ready to run but waiting for a CPU, over wall time."""
    steal_share: float | None
    """The share of the machine's CPU time its hypervisor gave to others (Linux steal)."""
    client_bound: bool


def client_verdict(
    lags_ns: npt.NDArray[Any],
    lag_limit_ms: float,
    *,
    loop_stalls: int | None = None,
    worst_stall_ms: float | None = None,
    cpu_share: float | None = None,
    cpu_busy_share: float | None = None,
    cpu_wait_share: float | None = None,
    steal_share: float | None = None,
) -> ClientVerdict:
    """The verdict from a run's dispatch lags (ns); the loop and CPU figures when known."""
    lag_p99 = float(np.percentile(lags_ns, 99)) / 1e6 if lags_ns.size else None
    return {
        "lag_p99_ms": lag_p99,
        "lag_limit_ms": lag_limit_ms,
        "loop_stalls": loop_stalls,
        "worst_stall_ms": worst_stall_ms,
        "cpu_share": cpu_share,
        "cpu_busy_share": cpu_busy_share,
        "cpu_wait_share": cpu_wait_share,
        "steal_share": steal_share,
        "client_bound": lag_p99 is not None and lag_p99 > lag_limit_ms,
    }


def verdict_line(v: ClientVerdict) -> str:
    """One line for people: the numbers, and what they mean when the client was the limit."""
    if v["lag_p99_ms"] is None:
        return "client: nothing was sent"
    lag = v["lag_p99_ms"]
    shown = f"{lag:.2f}" if lag < 1 else f"{lag:.1f}"  # an on-time run's lag is under 1 ms
    parts = [f"dispatch lag P99 {shown} ms (limit {v['lag_limit_ms']:g} ms)"]
    if v["cpu_share"] is not None:
        parts.append(f"CPU {v['cpu_share'] * 100:.0f}% of a core")
    if v["loop_stalls"]:
        parts.append(f"{v['loop_stalls']} loop stalls (worst {v['worst_stall_ms']:.0f} ms)")
    waited, stolen = v.get("cpu_wait_share") or 0.0, v.get("steal_share") or 0.0
    if waited >= WAIT_NOTED:
        parts.append(f"waited for a CPU {_pct(waited)} of the time")
    if stolen >= STEAL_NOTED:
        parts.append(f"hypervisor steal {_pct(stolen)} of the machine's CPU")
    line = ", ".join(parts)
    if not v["client_bound"]:
        return f"client: {line}"
    return (
        f"warning: the client was the bottleneck: {line}. Requests left late, so the target "
        "saw a different arrival process than recorded: every latency here describes this "
        f"client as much as the target. {_cure(_busy(v), waited, stolen)}"
    )


def _busy(v: ClientVerdict) -> float:
    """The CPU a replay's requests took (its busy wait before sends left out where known)."""
    busy = v.get("cpu_busy_share")
    return busy if busy is not None else v["cpu_share"] or 0.0


def _cure(cpu: float, waited: float, stolen: float) -> str:
    """What to do about a client-bound run, by its likeliest cause: a replay that kept
    its core busy is told to spread, whatever else was also happening."""
    if cpu >= SATURATED:
        return (
            "The replay kept its core busy: replay with --workers, on a less busy "
            "machine, or slower."
        )
    if stolen >= STEAL_NOTED:
        return (
            "The host gave this machine's CPUs to other guests during the run (steal), "
            "which no replay setting wins back: replay on dedicated vCPUs or another "
            "host, or at a quieter time."
        )
    if waited >= WAIT_NOTED:
        return (
            "Other processes held this machine's CPUs when sends were due (the target, "
            "other work, or the replay's own --workers): give the replay cores of its "
            "own, or replay slower."
        )
    return "Replay on a less busy machine, with --workers, or slower."


def _pct(share: float) -> str:
    return f"{share * 100:.1f}%" if share < 0.1 else f"{share * 100:.0f}%"
