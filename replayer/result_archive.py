"""A replay's result archive (``--out``): its header, which tells ``report`` what was
replayed and how (and one run's shards from another's), and its writer."""

from __future__ import annotations

from pathlib import Path

from tailreplay.replayer.config import ReplayConfig
from tailreplay.replayer.schedule import Plan
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.replay_header import ReplayHeader
from tailreplay.traces.archive.writer import ArchiveWriter
from tailreplay.traces.text.redact_targets import redact_url

__all__ = ["result_writer"]


def _scheduled(config: ReplayConfig, the_plan: Plan) -> int | None:
    """The requests this run is to send, when it alone sends the whole schedule: whole
    copies, no shard of another process, not cut by ``--duration``, not a closed loop
    (whose users draw as many as time allows)."""
    sc = config.schedule
    whole = sc.shard[1] == 1 and sc.amplify == int(sc.amplify)
    if not whole or config.duration_s is not None or config.users is not None:
        return None
    return the_plan.count * int(sc.amplify)


def result_writer(config: ReplayConfig, the_plan: Plan) -> ArchiveWriter | None:
    """The writer of ``--out``, its header saying what was replayed and how; None without."""
    if config.out is None:
        return None
    sc = config.schedule
    length_s = sc.speed.replay_offset(the_plan.span_s, the_plan.span_s)
    phases = sc.speed.phase_seconds(min(length_s, config.duration_s or float("inf")))
    if config.users is not None:  # a closed loop's phases are its user counts
        phases = config.users.phase_seconds(config.duration_s)
    replay = ReplayHeader(
        archives=tuple(str(Path(p).resolve()) for p in sc.paths),
        speed=str(sc.speed),
        speed_mean=sc.speed.mean(the_plan.span_s),
        phase_seconds=phases or None,
        users=str(config.users) if config.users is not None else None,
        tail_stretch=sc.tail_stretch,
        tail_quantile=sc.tail_quantile,
        amplify=sc.amplify,
        shard=sc.shard,
        start_at_ns=config.start_at_ns,
        lag_limit_ms=config.lag_limit_ms,
        otlp_live=config.spans is not None,
        seed=sc.seed,
        command=config.command,
        builtin=(
            ("offline, on a virtual clock: " if config.offline else "")
            + config.builtin_target.describe(the_plan.longest)
            if config.target is None and config.builtin_target is not None
            else None
        ),
        scheduled=_scheduled(config, the_plan),
    )
    header = make_header(
        "replay" if not config.dry_run else "replay:dry-run",
        upstream=redact_url(config.target) if config.target is not None else None,
        extra=replay.to_map(),
    )
    # A dry run produces results far faster than they can be written: it waits for
    # the writer. A live run never does (its pace is the schedule's), and packs each
    # result as it comes, so the writer thread never holds the GIL through a batch
    # while sends are due (its batches were most of the dispatch lag's P99 at 4,000/s).
    return ArchiveWriter(
        config.out,
        header=header,
        queue_size=10_000 if config.dry_run else 100_000,
        block_when_full=config.dry_run,
        pack_on_append=not config.dry_run,
    )
