"""``tailreplay sim``'s options, typed and declared once: each field carries its flags,
how its text is read, its default, range and help (``tailreplay/declared.py``). The
command line generates its click options from these fields, beside one option per
overridable profile field (``--max-num-seqs`` ..., named after ``EngineProfile``'s
fields); ``SimConfig`` defaults to the same declarations."""

from __future__ import annotations

from dataclasses import dataclass

from tailreplay.declared import Choice, Setting, declared
from tailreplay.option_values import HOST_PORT
from tailreplay.sim.profiles import PROFILES, SIM_PROFILE

__all__ = ["SimArgs"]


@dataclass(frozen=True, kw_only=True)
class SimArgs:
    """``sim``'s own options, parsed: one field per option, named as click names it,
    declared in the order ``--help`` lists them."""

    listen: tuple[str, int] = declared(
        Setting(
            "--listen",
            "127.0.0.1:8000",
            "HOST:PORT (port 0: any free port).",
            kind=HOST_PORT,
            show_default=True,
        )
    )
    profile_name: str = declared(
        Setting(
            "--profile",
            SIM_PROFILE.default,
            "fast: an 8B model on one H100; default: the same on one 24 GB GPU; or the path "
            "of a profile's JSON file (`sim calibrate` writes one).",
            kind=Choice(tuple(sorted(PROFILES)), files=True),
            show_default=True,
        )
    )
    seed: int = declared(
        Setting(
            "--seed", 0, "Seed for output lengths, text and faults.", kind=int, show_default=True
        )
    )
    fault_error_rate: float = declared(
        Setting("--fault-error-rate", 0.0, "Share of requests answered with 500.", kind=float)
    )
    fault_stall_ms: float = declared(
        Setting("--fault-stall-ms", 0.0, "Delay before each request's first token.", kind=float)
    )
    fault_reset_rate: float = declared(
        Setting("--fault-reset-rate", 0.0, "Share of streams reset mid-way.", kind=float)
    )
    nice: int = declared(
        Setting(
            "--nice",
            0,
            "Lower this process's CPU priority (replay's built-in target uses 5, so on a "
            "busy machine the replayer's timing comes first).",
            kind=int,
            low=0,
            high=19,
            show_default=True,
        )
    )
    no_prefix_cache: bool = declared(
        Setting(
            "--no-prefix-cache",
            False,
            "Turn the prefix cache off: every prompt is prefilled in full, and usage "
            "reports no cached_tokens.",
            is_flag=True,
        )
    )
    parent_pid: int | None = declared(
        Setting(
            "--exit-with-parent",
            None,
            "Stop when the process with this pid is no longer the parent (the launcher's).",
            kind=int,
            hidden=True,
        )
    )
