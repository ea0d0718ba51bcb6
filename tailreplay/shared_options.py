"""Options that several commands share, each declared once: flag, default, valid range
and help.

``replay``, ``capacity`` and ``deploy job`` (through the replay it runs in each pod)
take ``--speed``, ``--tail-stretch`` and ``--tail-quantile``; the configs take their
defaults from here, each command's typed options declare their fields with these
(``tailreplay/declared.py``), its click options are generated from those, and a
result archive's header is checked against the same range
(``traces/archive/replay_header.py``). So a value one command takes, every command
takes, and an archive that records it reads back. ``--target`` and ``--skip-corrupt``
are declared here too, for every command that reads archives or replays them.
"""

from __future__ import annotations

from tailreplay.declared import Setting
from tailreplay.option_values import HTTP_URL

__all__ = [
    "ADVISED_TAIL_STRETCH",
    "SKIP_CORRUPT",
    "SPEED",
    "TAIL_QUANTILE",
    "TAIL_STRETCH",
    "TARGET",
    "Setting",
]

TARGET: Setting[None] = Setting("--target", None, kind=HTTP_URL)
"""The deployment a replay runs against; each command says in its help what it is
without one (``replace(TARGET, help=...)``)."""
SKIP_CORRUPT: Setting[bool] = Setting(
    "--skip-corrupt",
    False,
    "Skip damaged regions (reporting how many bytes) instead of stopping.",
    is_flag=True,
)


SPEED: Setting[str] = Setting(
    "--speed",
    "1x",
    "2x, 200%, 0.5x; a ramp 1x..4x; steps 1x,2x,3x@2m (each the next 2 minutes of replay "
    "time, the last to the end); pulses 1x+10x:5s/60s (5 s at 10x every 60 s).",
    show_default=True,
)
TAIL_STRETCH: Setting[float] = Setting(
    "--tail-stretch",
    1.8,
    "Output budget factor for the requests of the recorded tail (1 turns it off).",
    low=1.0,
    high=4.0,
    show_default=True,
)
ADVISED_TAIL_STRETCH = (1.5, 2.0)
"""Below, too weak to keep the tail's pressure; above, it distorts the workload: a run
outside says so, and runs."""
TAIL_QUANTILE: Setting[float] = Setting(
    "--tail-quantile",
    0.99,
    "Where the tail starts: the recorded requests above this quantile of their cost.",
    low=0.0,
    high=1.0,
    low_open=True,
    high_open=True,
    show_default=True,
)
