"""A replay as its user asks for it: the options of ``tailreplay replay``, parsed and typed.

The command line parses into it; the public API and the studies (capacity, validate-model)
build one in code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yarl import URL

from tailreplay.exporters.otlp_options import OtlpOptions
from tailreplay.replayer.scrape import ScrapeTarget
from tailreplay.replayer.speed import Shape
from tailreplay.replayer.users import Users
from tailreplay.report.slo import Objective

__all__ = ["ReplayArgs"]


@dataclass(frozen=True)
class ReplayArgs:
    """``replay``'s options, parsed: one field per option, named as click names it."""

    archives: tuple[Path, ...]
    target: URL | None
    speed: Shape
    amplify: float
    spread_ticks: bool | None
    tail_stretch: float
    tail_quantile: float
    tail_cost: tuple[float, float] | None
    max_context: int | None
    force_lengths: bool
    headers: tuple[tuple[str, str], ...]
    model_maps: tuple[tuple[str, str], ...]
    body_sets: tuple[tuple[str, Any], ...]
    body_drops: tuple[str, ...]
    max_inflight: int
    connections: int
    timeout: float
    limit: int | None
    from_: str | None
    to: str | None
    out: Path | None
    json_out: Path | None
    shard: tuple[int, int]
    start_at: int | None
    allow_upstream: bool
    new_trace_ids: bool
    dry_run: bool
    seed: int
    sim_profile: str
    sim_args: tuple[str, ...]
    skip_corrupt: bool
    scrapes: tuple[ScrapeTarget, ...]
    users: Users | None
    think: float | None
    retries: str
    max_attempts: int
    client_aborts: str
    metrics_listen: tuple[str, int] | None
    metrics_linger: float
    lag_limit: float
    preflight: bool
    fail_fast: int
    duration: float | None
    report_out: Path | None
    slos: list[Objective]
    slo_min_score: float
    slo_by: str | None
    slo_window: float | None
    slo_stop: str | None
    slo_report: bool
    workers: int
    event_loop: str
    otlp: OtlpOptions
