"""A replay as its user asks for it: the options of ``tailreplay replay``, parsed and typed.

The command line parses into a ``ReplayArgs``; the Python API and the studies build one
in code. ``to_argv`` writes one back as ``replay``'s own arguments, for the child
processes the studies run (a capacity trial, a validate-model arm) and the pods of a
sharded job: no caller spells a replay's flags by hand.

Each field is named as click names the option and defaults to what click gives when
the option is left out (``tests/studies/test_replay_args.py`` holds the two together, and
every field's round trip through ``to_argv`` and the real parser).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from yarl import URL

from tailreplay.exporters.otlp_options import OtlpOptions
from tailreplay.replayer.scrape import ScrapeTarget
from tailreplay.replayer.speed import Shape, parse_speed
from tailreplay.replayer.users import Users
from tailreplay.report.slo import Objective
from tailreplay.shared_options import TAIL_QUANTILE, TAIL_STRETCH
from tailreplay.units import host_port

__all__ = ["ReplayArgs"]

_Argv = Callable[[Any], list[str]]


def _seconds(v: float) -> str:
    return f"{v!r}s"


def _one(flag: str, text: Callable[[Any], str] = str) -> _Argv:
    """``flag VALUE`` for a set option."""
    return lambda v: [flag, text(v)]


def _each(flag: str, text: Callable[[Any], str] = str) -> _Argv:
    """``flag VALUE`` per value of a repeatable option."""
    return lambda values: [a for v in values for a in (flag, text(v))]


def _switch(on: str, off: str) -> _Argv:
    """A boolean pair (``--preflight/--no-preflight``)."""
    return lambda v: [on if v else off]


def _flag(flag: str) -> _Argv:
    return lambda v: [flag] if v else []


def _writes(argv: _Argv) -> dict[str, _Argv]:
    """A field's metadata: how its value is written back as ``replay``'s arguments."""
    return {"argv": argv}


def _otlp_argv(o: OtlpOptions) -> list[str]:
    """The ``--otlp-*`` flags, those set."""
    out: list[str] = []
    for flag, value in (
        ("--otlp-endpoint", o.endpoint),
        ("--otlp-protocol", o.protocol),
        ("--otlp-ca", o.ca),
        ("--otlp-cert", o.cert),
        ("--otlp-key", o.key),
    ):
        if value is not None:
            out += [flag, str(value)]
    out += [a for k, v in o.headers for a in ("--otlp-header", f"{k}={v}")]
    out += [a for k, v in o.resource for a in ("--resource", f"{k}={v}")]
    out += ["--otlp-insecure"] if o.insecure else []
    defaults = OtlpOptions()
    if o.timeout_s != defaults.timeout_s:
        out += ["--otlp-timeout", _seconds(o.timeout_s)]
    if o.trace_sample != defaults.trace_sample:
        out += ["--trace-sample", repr(o.trace_sample)]
    out += ["--otlp-capture-content"] if o.capture_content else []
    if o.provider_name != defaults.provider_name:
        out += ["--gen-ai-provider", o.provider_name]
    return out


@dataclass(frozen=True)
class ReplayArgs:
    """``replay``'s options, parsed: one field per option, named as click names it."""

    archives: tuple[Path, ...] = ()
    """The archives to replay (``replay``'s arguments, written last)."""
    target: URL | None = field(default=None, metadata=_writes(_one("--target")))
    speed: Shape = field(
        default_factory=lambda: parse_speed("1x"), metadata=_writes(_one("--speed"))
    )
    amplify: float = field(default=1.0, metadata=_writes(_one("--amplify", lambda v: f"{v!r}x")))
    spread_ticks: bool | None = field(
        default=None, metadata=_writes(_switch("--spread-ticks", "--no-spread-ticks"))
    )
    tick_placement: str = field(default="random", metadata=_writes(_one("--tick-placement")))
    tail_stretch: float = field(
        default=TAIL_STRETCH.default, metadata=_writes(_one(TAIL_STRETCH.flag, repr))
    )
    tail_quantile: float = field(
        default=TAIL_QUANTILE.default, metadata=_writes(_one(TAIL_QUANTILE.flag, repr))
    )
    tail_cost: tuple[float, float] | None = field(
        default=None,
        metadata=_writes(_one("--tail-cost", lambda v: f"input={v[0]!r},output={v[1]!r}")),
    )
    max_context: int | None = field(default=None, metadata=_writes(_one("--max-context")))
    force_lengths: bool = field(
        default=True, metadata=_writes(_switch("--force-lengths", "--no-force-lengths"))
    )
    headers: tuple[tuple[str, str], ...] = field(
        default=(), metadata=_writes(_each("--header", lambda v: f"{v[0]}: {v[1]}"))
    )
    model_maps: tuple[tuple[str, str], ...] = field(
        default=(), metadata=_writes(_each("--model-map", lambda v: f"{v[0]}={v[1]}"))
    )
    body_sets: tuple[tuple[str, Any], ...] = field(
        default=(), metadata=_writes(_each("--body-set", lambda v: f"{v[0]}={json.dumps(v[1])}"))
    )
    body_drops: tuple[str, ...] = field(default=(), metadata=_writes(_each("--body-drop")))
    max_inflight: int = field(default=4096, metadata=_writes(_one("--max-inflight")))
    connections: int = field(default=1024, metadata=_writes(_one("--connections")))
    timeout: float = field(default=300.0, metadata=_writes(_one("--timeout", _seconds)))
    limit: int | None = field(default=None, metadata=_writes(_one("--limit")))
    from_: str | None = field(default=None, metadata=_writes(_one("--from")))
    to: str | None = field(default=None, metadata=_writes(_one("--to")))
    out: Path | None = field(default=None, metadata=_writes(_one("--out")))
    overwrite: bool = field(default=False, metadata=_writes(_flag("--overwrite")))
    """Replace an existing result archive at ``out`` (else refused, exit 2)."""
    json_out: Path | None = field(default=None, metadata=_writes(_one("--json")))
    shard: tuple[int, int] = field(
        default=(0, 1), metadata=_writes(_one("--shard", lambda v: f"{v[0]}/{v[1]}"))
    )
    start_at: int | None = field(
        default=None, metadata=_writes(_one("--start-at", lambda v: repr(v / 1e9)))
    )
    """Unix ns."""
    allow_upstream: bool = field(default=False, metadata=_writes(_flag("--allow-upstream")))
    new_trace_ids: bool = field(default=False, metadata=_writes(_flag("--new-trace-ids")))
    dry_run: bool = field(default=False, metadata=_writes(_flag("--dry-run")))
    seed: int = field(default=0, metadata=_writes(_one("--seed")))
    sim_profile: str = field(default="fast", metadata=_writes(_one("--sim-profile")))
    sim_args: tuple[str, ...] = field(
        default=(), metadata=_writes(lambda v: [f"--sim-arg={a}" for a in v])
    )
    skip_corrupt: bool = field(default=False, metadata=_writes(_flag("--skip-corrupt")))
    scrapes: tuple[ScrapeTarget, ...] = field(
        default=(), metadata=_writes(_each("--scrape", lambda s: f"{s.url}@{s.interval_s!r}s"))
    )
    users: Users | None = field(default=None, metadata=_writes(_one("--users")))
    think: float | None = field(
        default=0.0,
        metadata=_writes(_one("--think", lambda v: "recorded" if v is None else _seconds(v))),
    )
    """Seconds; None: the recorded gap."""
    retries: str = field(default="recorded", metadata=_writes(_one("--retries")))
    max_attempts: int = field(default=3, metadata=_writes(_one("--max-attempts")))
    client_aborts: str = field(default="replay", metadata=_writes(_one("--client-aborts")))
    metrics_listen: tuple[str, int] | None = field(
        default=None, metadata=_writes(_one("--metrics-listen", lambda v: host_port(*v)))
    )
    metrics_linger: float = field(default=0.0, metadata=_writes(_one("--metrics-linger", _seconds)))
    lag_limit: float = field(default=0.005, metadata=_writes(_one("--lag-limit", _seconds)))
    """Seconds."""
    preflight: bool = field(
        default=True, metadata=_writes(_switch("--preflight", "--no-preflight"))
    )
    fail_fast: int = field(default=20, metadata=_writes(_one("--fail-fast")))
    duration: float | None = field(default=None, metadata=_writes(_one("--duration", _seconds)))
    report_out: Path | None = field(default=None, metadata=_writes(_one("--report")))
    slos: list[Objective] = field(
        default_factory=list, metadata=_writes(_each("--slo", lambda o: o.text))
    )
    slo_min_score: float = field(default=1.0, metadata=_writes(_one("--slo-min-score", repr)))
    slo_by: str | None = field(default=None, metadata=_writes(_one("--slo-by")))
    slo_window: float | None = field(default=None, metadata=_writes(_one("--slo-window", _seconds)))
    slo_stop: str | None = field(default=None, metadata=_writes(_one("--slo-stop")))
    slo_report: bool = field(
        default=True, metadata=_writes(lambda v: [] if v else ["--no-slo-report"])
    )
    """False: a caller judges the results itself (``capacity``'s trials)."""
    workers: int = field(default=1, metadata=_writes(_one("--workers")))
    event_loop: str = field(default="asyncio", metadata=_writes(_one("--event-loop")))
    otlp: OtlpOptions = field(default_factory=OtlpOptions, metadata=_writes(_otlp_argv))

    def to_argv(self) -> list[str]:
        """``replay``'s arguments for these options: each option that differs from its
        default, then the archives."""
        defaults = ReplayArgs()
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            # Every option has its writer; the archives, arguments, come last.
            if "argv" in f.metadata and value != getattr(defaults, f.name):
                argv += f.metadata["argv"](value)
        paths = [str(p) for p in self.archives]
        # A path that starts with "-" would read as an option.
        return [*argv, *(["--"] if any(p.startswith("-") for p in paths) else []), *paths]
