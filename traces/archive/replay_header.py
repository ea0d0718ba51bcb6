"""What a replay's result archive says of the run, in its header: the one definition of
those fields, written by the replayer and read by the report, the export and the merge.

A result archive's header is the common one (``format.make_header``: format, version,
source ``replay``, upstream, ...) plus the fields of ``ReplayHeader``. Reading takes
the header as the reader validated it (``validate.clean_header`` drops a damaged
field), so every field may be absent: each has the value a reader assumes then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypedDict, cast

from tailreplay.option_values import MAX_SHARDS
from tailreplay.shared_options import TAIL_QUANTILE, TAIL_STRETCH, Setting
from tailreplay.traces.archive.value_checks import Check, is_str, number

__all__ = ["REPLAY_CHECKS", "ReplayHeader", "ReplaySettings", "is_replay"]


def is_replay(header: Mapping[str, Any]) -> bool:
    """Whether a file holds a replay's results (source ``replay``, ``replay:dry-run``)."""
    return str(header.get("source", "")).startswith("replay")


class ReplaySettings(TypedDict, total=False):
    """What the report names of the run (``report["replay"]``, key for key): the result
    archive's origin, and the ``ReplayHeader`` fields that describe the schedule."""

    source: str
    upstream: str
    created_ns: int
    tool_version: str
    speed: str
    speed_mean: float
    tail_stretch: float
    tail_quantile: float
    amplify: float
    shard: list[int]
    users: str
    seed: int
    command: list[str]
    builtin: str
    scheduled: int


_ORIGIN = ("source", "upstream", "created_ns", "tool_version")
"""The common header's fields among the settings (``format.make_header``)."""


@dataclass(frozen=True)
class ReplayHeader:
    """The run's settings as its result archive records them."""

    archives: tuple[str, ...] = ()
    """What was replayed (absolute paths), so ``report`` finds the recorded side."""
    speed: str | None = None
    """``--speed`` as given (``2x``, ``1x..4x``, steps, pulses)."""
    speed_mean: float | None = None
    """The shape's mean factor over this replay (recorded span / replay length), by
    which the report scales recorded rates."""
    phase_seconds: dict[str, float] | None = None
    """How long each phase of a load shape (or of a closed loop's user counts) lasted."""
    users: str | None = None
    """A closed loop's ``--users``."""
    tail_stretch: float | None = None
    tail_quantile: float | None = None
    amplify: float | None = None
    shard: tuple[int, int] | None = None
    """``--shard i/N``; (0, 1) unsharded, and for ``--workers``' merged result."""
    workers: int | None = None
    """``--workers N``: the processes whose parts the result merges."""
    start_at_ns: int | None = None
    """The shards' common start (``--start-at``; ``--workers`` sets one), which tells
    one run's shards from another's."""
    lag_limit_ms: float | None = None
    """``--lag-limit``: the dispatch lag P99 above which the client was the bottleneck."""
    otlp_live: bool | None = None
    """Spans were sent while the run ran (``traces export otlp`` would send them twice)."""
    seed: int | None = None
    """``--seed``: every draw of the schedule (tick spreading, copies, synthetic text)."""
    command: tuple[str, ...] | None = None
    """The command line, header values masked (``cli/command_line.py``)."""
    builtin: str | None = None
    """The built-in simulator the run started (no ``--target``: no upstream URL), as
    its start line describes it: profile and sizes."""
    scheduled: int | None = None
    """Requests the schedule holds, each copy counted, when one process replays all of
    it to the end of its window (no shard, ``--duration`` or closed loop): a result
    with fewer due requests was cut short (Ctrl-C, ``--fail-fast``, ``--slo-stop``)."""

    @property
    def shards(self) -> int:
        """N of ``--shard i/N`` (1 when unsharded or unknown)."""
        return self.shard[1] if self.shard is not None else 1

    @staticmethod
    def settings(header: Mapping[str, Any], *, one_shard: bool = True) -> ReplaySettings:
        """What the report names of the run in this (validated) header: where the result
        came from, speed, tail, copies, shard (only when ``one_shard``: a merged result's
        shards each name theirs); read back with ``read``."""
        replay = ReplayHeader.read(header)
        if not one_shard:
            replay = replace(replay, shard=None)
        shown = ReplaySettings.__annotations__.keys()
        origin = {k: header[k] for k in _ORIGIN if k in header}
        return cast(
            ReplaySettings, origin | {k: v for k, v in replay.to_map().items() if k in shown}
        )

    def differs_from(self, other: ReplayHeader) -> tuple[str, Any, Any] | None:
        """The first setting in which two result files are not shards of one run: the
        schedule (archives, in any order; speed, tail, copies), the shard count, the
        common start. None when they agree."""
        for name, mine, theirs in (
            ("archives", sorted(self.archives), sorted(other.archives)),
            ("speed", self.speed, other.speed),
            ("tail_stretch", self.tail_stretch, other.tail_stretch),
            ("tail_quantile", self.tail_quantile, other.tail_quantile),
            ("amplify", self.amplify, other.amplify),
            ("shards", self.shards, other.shards),
            ("start_at_ns", self.start_at_ns, other.start_at_ns),
        ):
            if mine != theirs:
                return name, mine, theirs
        return None

    def to_map(self) -> dict[str, Any]:
        """The fields for ``make_header(extra=...)``: msgpack types, absent ones left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> ReplayHeader:
        """The fields of a (validated) header; what is absent or damaged, its default."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = header.get(f.name)
            check = REPLAY_CHECKS[f.name][0]
            if value is None or not check(value):
                continue
            if f.name in ("archives", "shard", "command"):
                value = tuple(value)
            elif f.name == "phase_seconds":
                value = {k: float(v) for k, v in value.items()}
            values[f.name] = value
        return cls(**values)


def _admitted(setting: Setting[float]) -> Check:
    return lambda v: type(v) in (int, float) and setting.admits(v)


def _strs(v: Any) -> bool:
    return type(v) in (list, tuple) and all(type(s) is str for s in v)


def _whole(v: Any) -> bool:
    return type(v) is int and 0 <= v < 1 << 63


def _shard(v: Any) -> bool:
    """``[i, N]``: shard i (from 0) of N."""
    pair = type(v) in (list, tuple) and len(v) == 2
    return pair and all(type(i) is int for i in v) and 0 <= v[0] < v[1] <= MAX_SHARDS


def _phase_seconds(v: Any) -> bool:
    return type(v) is dict and all(
        type(k) is str and type(s) in (int, float) and 0 <= s < 1e12 for k, s in v.items()
    )


REPLAY_CHECKS: dict[str, tuple[Check, str]] = {
    "archives": (_strs, "an array of str"),
    "speed": (is_str, "a str"),
    "tail_stretch": (_admitted(TAIL_STRETCH), f"a finite number, {TAIL_STRETCH.range_text()}"),
    "tail_quantile": (_admitted(TAIL_QUANTILE), f"a finite number, {TAIL_QUANTILE.range_text()}"),
    "amplify": (number(0, 1e6), "a finite number in 0..1e6"),
    "speed_mean": (number(0, 1e6), "a finite number in 0..1e6"),
    "phase_seconds": (_phase_seconds, "a map of str to seconds in 0..1e12"),
    "shard": (_shard, f"[i, N] with 0 <= i < N <= {MAX_SHARDS}"),
    "lag_limit_ms": (number(0, 1e9), "a finite number in 0..1e9"),
    "start_at_ns": (_whole, "an int in 0..2^63-1"),
    "otlp_live": (lambda v: type(v) is bool, "a bool"),
    "users": (is_str, "a str"),
    "workers": (lambda v: type(v) is int and 1 <= v <= 1 << 16, "an int in 1..65536"),
    "seed": (lambda v: type(v) is int and -(1 << 63) <= v < 1 << 63, "a 64-bit int"),
    "command": (_strs, "an array of str"),
    "builtin": (is_str, "a str"),
    "scheduled": (_whole, "an int in 0..2^63-1"),
}
"""What each field must be; ``validate.header_problems`` names a damaged one."""
