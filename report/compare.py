"""The report's figures: recorded against replayed, overall, per input length, per request.

``compare(recorded, replayed)`` returns one JSON-ready ``Report`` (report.model);
every renderer (terminal, Markdown, HTML) and the SLO check read only that.

Definitions (docs/report.md repeats them for users):
- latency is arrival (recorded) or send (replayed) to the last byte; for a replay
  ``latency_from_due`` adds the dispatch lag: what a user arriving on schedule felt;
- TTFT is over streamed requests (for a non-streamed one the first byte is the
  whole answer); TPOT = (latency - TTFT) / (output tokens - 1); ITL is the gap
  between streamed chunks;
- all of them count successful requests only; errors have their own rate;
- throughput is successful requests per second of the side's own window (first
  start to last end), so a 2x replay shows twice the recorded throughput: the
  recorded rates are compared scaled by the replay's speed (``rate_scale``);
- a replayed request is bucketed by the input length recorded for its original
  (joined on trace and span id), so both columns of a bucket hold the same requests;
  it counts in its original's API route likewise (report/routes.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.errors import UsageError
from tailreplay.report.deltas import deltas, join
from tailreplay.report.model import (
    Cdf,
    ClosedLoopRow,
    ErrorKind,
    Metric,
    Metrics,
    Percentiles,
    PerSide,
    PhaseRow,
    ReplaySettings,
    Report,
    Retries,
    Series,
    SideName,
    SideSummary,
    per_side,
)
from tailreplay.report.quantiles import Estimate, estimates
from tailreplay.report.routes import route_masks
from tailreplay.report.shards import ShardLags, shard_lags
from tailreplay.report.side import Side
from tailreplay.traces.archive.replay_header import ReplayHeader
from tailreplay.traces.results.client_health import (
    DEFAULT_LAG_LIMIT_MS,
    ClientVerdict,
    client_verdict,
    verdict_line,
)
from tailreplay.traces.results.figures import metric_values
from tailreplay.traces.results.stats import DEFAULT_BUCKETS, bucket_bounds, bucket_label
from tailreplay.units import parse_factor

__all__ = ["compare"]

SERIES_BINS = 60
CDF_POINTS = (
    [float(p) for p in range(1, 90)] + [90 + i * 0.5 for i in range(19)] + [99.5, 99.9, 99.99]
)

Array = npt.NDArray[Any]
Mask = npt.NDArray[np.bool_]


def compare(
    recorded: Side | None,
    replayed: Side,
    *,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    seed: int = 0,
) -> Report:
    """``replayed`` against ``recorded`` (None: the replay alone); ``seed`` fixes the bootstrap."""
    rng = np.random.default_rng(seed)
    joined = join(recorded, replayed) if recorded is not None else None
    bucket_tokens = _bucket_tokens(recorded, replayed, joined)
    sides: dict[SideName, Side] = {"replayed": replayed}
    if recorded is not None:
        sides = {"recorded": recorded, "replayed": replayed}
    windows = {name: _window_s(side) for name, side in sides.items()}
    shards = shard_lags(replayed, _lag_limit(replayed)) if replayed.is_replay else None
    # Every comprehension runs the recorded side first: the bootstrap draws come from
    # one generator, so the order fixes the intervals.
    report: Report = {
        "inputs": per_side({name: side.paths for name, side in sides.items()}),
        "replay": _replay_settings(replayed),
        "overall": per_side(
            {
                name: summarize(side, np.ones(side.n, dtype=bool), windows[name], rng, itl=True)
                for name, side in sides.items()
            }
        ),
        "buckets": [],
        "routes": [],
        "phases": [],
        "deltas": deltas(recorded, replayed, joined)
        if recorded is not None and joined is not None
        else None,
        "errors": per_side({name: _errors(side) for name, side in sides.items()}),
        "rate_scale": _rate_scale(replayed) if recorded is not None else None,
        "series": per_side({name: _series(side) for name, side in sides.items()}),
        "cdf": per_side(
            {name: _cdf(_values(side, side.ok)["latency"]) for name, side in sides.items()}
        ),
        "warnings": [w for side in sides.values() for w in side.warnings],
        "client": _client(replayed, shards),
    }
    _client_findings(report, shards)
    if any(side.idle.paths for side in sides.values()):
        report["idle"] = per_side({name: side.idle.rows() for name, side in sides.items()})
    bucket_masks = _bucket_masks(bucket_tokens, buckets)
    for label, masks in bucket_masks:
        report["buckets"].append({"range": label, **_summaries(sides, masks, windows, rng)})
    report["phases"] += _phases(replayed, rng)
    users = next((r.users for r in replayed.replays if r.users is not None), None)
    if users is not None:
        report["closed_loop"] = _closed_loop(replayed, users, bucket_masks, rng)
    if any(side.retry.any() for side in sides.values()):
        report["retries"] = per_side({name: _retries(side) for name, side in sides.items()})
    # Last of the bootstrap's draws: the figures before it stay what they were.
    for route, masks in route_masks(recorded, replayed, joined):
        report["routes"].append({"route": route, **_summaries(sides, masks, windows, rng)})
    return report


def _summaries(
    sides: dict[SideName, Side],
    masks: dict[SideName, Mask],
    windows: dict[SideName, float | None],
    rng: np.random.Generator,
) -> PerSide[SideSummary]:
    """Each side's figures over its selected requests (a bucket's, a route's)."""
    return per_side(
        {
            name: summarize(side, masks[name], windows[name], rng, itl=False)
            for name, side in sides.items()
        }
    )


RETRY_BIN_S = 60.0
MAX_RETRY_BINS = 120


def _retries(side: Side) -> Retries | None:
    """A side's first attempts and retries, overall and per ``RETRY_BIN_S`` of its time."""
    if not side.retry.any():
        return None
    offsets = side.start_ns - side.start_ns.min()
    # A minute a row, or as many minutes as keep a long capture to MAX_RETRY_BINS rows.
    minutes = max(1, math.ceil(float(offsets.max()) / 1e9 / (RETRY_BIN_S * MAX_RETRY_BINS)))
    bin_s = RETRY_BIN_S * minutes
    bins = (offsets // round(bin_s * 1e9)).astype(np.int64)
    retries = np.bincount(bins, weights=side.retry, minlength=int(bins.max()) + 1)
    every = np.bincount(bins, minlength=retries.size)
    firsts = every - retries
    first, again = int(firsts.sum()), int(retries.sum())
    return {
        "first_attempts": first,
        "retries": again,
        "attempts_per_request": (first + again) / max(first, 1),
        "bin_s": bin_s,
        "by_time": [
            (i * bin_s, int(f), int(r))
            for i, (f, r) in enumerate(zip(firsts, retries, strict=True))
        ],
    }


def _closed_loop(
    side: Side,
    users: str,
    buckets: list[tuple[str, dict[SideName, Mask]]],
    rng: np.random.Generator,
) -> list[ClosedLoopRow]:
    """A closed loop's requests by user count (its steps, or its one count) and input
    length: the load test's table of users, throughput, P95 and errors."""
    seconds = _phase_seconds(side)
    steps = [
        (label, side.phase == i, seconds.get(label))
        for i, label in enumerate(side.labels.get("phase", []))
    ]
    if not steps:
        steps = [(f"{users} users", np.ones(side.n, dtype=bool), _window_s(side))]
    rows: list[ClosedLoopRow] = []
    for label, in_step, window in steps:
        for bucket, masks in buckets:
            sel = in_step & masks["replayed"]
            if sel.any():
                span = float(window) if window else None
                rows.append(
                    {
                        "users": label,
                        "range": bucket,
                        "seconds": span,
                        "replayed": summarize(side, sel, span, rng, itl=False),
                    }
                )
    return rows


def _phase_seconds(side: Side) -> dict[str, float]:
    """How long each phase of the replay lasted (its header's)."""
    return next((dict(r.phase_seconds) for r in side.replays if r.phase_seconds), {})


def _phases(side: Side, rng: np.random.Generator) -> list[PhaseRow]:
    """The replayed requests by the load shape's phase they were due in, each phase's
    throughput over the seconds it lasted (the header's ``phase_seconds``)."""
    seconds = _phase_seconds(side)
    rows: list[PhaseRow] = []
    for i, label in enumerate(side.labels.get("phase", [])):
        window = seconds.get(label)
        span = float(window) if window else None
        summary = summarize(side, side.phase == i, span, rng, itl=False)
        rows.append(
            {"phase": label, "seconds": float(window) if window else None, "replayed": summary}
        )
    return rows


def _client_findings(report: Report, shards: ShardLags | None) -> None:
    """The shards that started late, whether they explain the dispatch lag (and the
    shards' table when there are several), and the client verdict."""
    client = report["client"]
    if shards is not None:
        report["warnings"] += shards.lines(client)
        if len(shards.rows) > 1:
            report["shards"] = shards.block(client)
    if client is not None and client["client_bound"]:
        report["warnings"].append(verdict_line(client).removeprefix("warning: "))


def _client(side: Side, shards: ShardLags | None) -> ClientVerdict | None:
    """The replay's verdict on its client, from the lags its records carry: all of
    them but the catch-up of shards that started late (report/shards.py)."""
    if not side.is_replay:
        return None
    sent = side.lag_ns >= 0
    judged = shards.judged(sent) if shards is not None else sent
    return client_verdict(side.lag_ns[judged], _lag_limit(side))


def _lag_limit(side: Side) -> float:
    """The run's ``--lag-limit`` (its header's), in ms."""
    limit = next((r.lag_limit_ms for r in side.replays if r.lag_limit_ms is not None), None)
    return float(limit) if limit is not None else DEFAULT_LAG_LIMIT_MS


def _rate_scale(replayed: Side) -> float | None:
    """The replay's mean speed times its copies. The header's ``speed_mean`` is the
    shape's (recorded span over replay length); without it, a ramp ``a..b`` replays
    the recording in 2/(a + b) of its time, so its mean factor is (a + b)/2."""
    header = replayed.replays[0] if replayed.headers else ReplayHeader()
    copies = float(header.amplify) if header.amplify else 1.0
    if header.speed_mean:
        return header.speed_mean * copies
    speed = header.speed
    if speed is None:
        return None
    try:
        ends = [parse_factor(part, "speed") for part in speed.split("..")]
    except UsageError:
        return None
    return sum(ends) / len(ends) * copies


def _errors(side: Side) -> list[ErrorKind]:
    """The side's failures by kind, most frequent first, each with its first message."""
    kinds = sorted(side.error_kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    return [{"kind": k, "count": n, "message": side.error_messages.get(k)} for k, n in kinds]


def _replay_settings(side: Side) -> ReplaySettings:
    header = side.headers[0] if side.headers else {}
    # Merged shards' results have a header each: name the shard only when they agree
    # (``shards`` has every one).
    return ReplayHeader.settings(header, one_shard=len({r.shard for r in side.replays}) <= 1)


def _values(side: Side, sel: Mask) -> dict[Metric, Array]:
    """Per-request milliseconds of each metric over the selected successful requests."""
    return metric_values(side.requests, sel)


def _window_s(side: Side) -> float | None:
    """First start to last end of the side, in seconds; every throughput divides by it,
    the buckets' too, so they add up to the whole."""
    sel = side.start_ns >= 0
    starts = side.start_ns[sel]
    if starts.size == 0:
        return None
    ends = starts + np.maximum(side.duration_ns[sel], 0)
    span = float(ends.max() - starts.min()) / 1e9
    return span if span > 0 else None


def summarize(
    side: Side, sel: Mask, window: float | None, rng: np.random.Generator, *, itl: bool
) -> SideSummary:
    count = int(sel.sum())
    cancelled = int((sel & side.cancelled).sum())
    errors = int((sel & side.error & ~side.cancelled).sum())
    metrics: Metrics = {}
    # Every metric resampled with the same draws: equal values (latency and latency from
    # due with no lag) get equal intervals, not two seeds' worth of difference.
    seed = int(rng.integers(2**63))
    for name, values in _values(side, sel & side.ok).items():
        metrics[name] = _as_json(estimates(values, rng=np.random.default_rng(seed)))
    if itl:
        gaps = side.itl_us.percentiles()
        binned = {k: Estimate(v, None, None) for k, v in gaps.items()} if gaps else None
        metrics["itl"] = _as_json(binned, scale=1e-3)
    ok = count - errors - cancelled
    judged = count - cancelled
    out_tokens = side.output_tokens[sel & side.ok]
    return {
        "requests": count,
        "errors": errors,
        "error_rate": errors / judged if judged else None,
        "cancelled": cancelled,
        "throughput_rps": ok / window if window else None,
        "output_tokens_per_s": float(out_tokens[out_tokens > 0].sum()) / window if window else None,
        "tail": int((sel & side.tail).sum()),
        "estimated_share": float((sel & side.estimated).sum()) / count if count else None,
        "metrics": metrics,
    }


def _as_json(est: dict[str, Estimate] | None, scale: float = 1.0) -> Percentiles | None:
    if est is None:
        return None
    return {
        q: {
            "value": e.value * scale,
            "low": None if e.low is None else e.low * scale,
            "high": None if e.high is None else e.high * scale,
        }
        for q, e in est.items()
    }


def _bucket_tokens(
    recorded: Side | None, replayed: Side, joined: Array | None
) -> dict[SideName, Array]:
    """Per side, the input tokens each request is bucketed by (-1: unknown)."""
    tokens = replayed.input_tokens.copy()
    if recorded is None or joined is None:
        return {"replayed": tokens}
    matched = joined >= 0
    tokens[matched] = recorded.input_tokens[joined[matched]]
    return {"recorded": recorded.input_tokens, "replayed": tokens}


def _bucket_masks(
    tokens: dict[SideName, Array], edges: Sequence[int]
) -> list[tuple[str, dict[SideName, Mask]]]:
    """(label, {side: mask}) per input-length bucket, plus "unknown" when any side needs it."""
    rows = []
    for lo, hi in bucket_bounds(edges):
        masks: dict[SideName, Mask] = {}
        for name, t in tokens.items():
            sel: Mask = t >= (lo if lo is not None else 0)
            if hi is not None:
                sel &= t < hi
            masks[name] = sel
        rows.append((bucket_label(lo, hi), masks))
    if any(bool((t < 0).any()) for t in tokens.values()):
        rows.append(("unknown", {name: t < 0 for name, t in tokens.items()}))
    return rows


def _series(side: Side) -> Series:
    """Per time bin: requests started, latency P50/P99, dispatch lag P99 (replays)."""
    has = side.start_ns >= 0
    out: Series = {
        "bin_s": None,
        "t_s": [],
        "rate_rps": [],
        "p50_ms": [],
        "p99_ms": [],
        "lag_p99_ms": [] if side.is_replay else None,
    }
    if not has.any():
        return out
    starts = side.start_ns[has]
    t0 = int(starts.min())
    span = max(float(starts.max() - t0) / 1e9, 1e-3)
    bin_s = span / SERIES_BINS
    which = np.minimum(((side.start_ns - t0) / 1e9 / bin_s).astype(np.int64), SERIES_BINS - 1)
    ok = has & side.ok & (side.duration_ns >= 0)
    lagged = has & (side.lag_ns >= 0)
    out["bin_s"] = bin_s
    for b in range(SERIES_BINS):
        in_bin = has & (which == b)
        lat = side.duration_ns[in_bin & ok] * 1e-6
        out["t_s"].append(b * bin_s)
        out["rate_rps"].append(float(in_bin.sum()) / bin_s)
        out["p50_ms"].append(float(np.percentile(lat, 50)) if lat.size else None)
        out["p99_ms"].append(float(np.percentile(lat, 99)) if lat.size else None)
        if out["lag_p99_ms"] is not None:
            lag = side.lag_ns[in_bin & lagged] * 1e-6
            out["lag_p99_ms"].append(float(np.percentile(lag, 99)) if lag.size else None)
    return out


def _cdf(values: Array) -> Cdf:
    if values.size == 0:
        return {"pct": [], "ms": []}
    return {"pct": CDF_POINTS, "ms": [float(v) for v in np.percentile(values, CDF_POINTS)]}
