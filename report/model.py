"""The report's data: what ``compare`` and ``check`` return and the renderers read.

TypedDicts, so a report is a plain dict at run time: ``json.dump`` writes it as it
is, and users read the same keys back from ``--json``. Times are milliseconds
unless the key names another unit (``bin_s``, ``t_s``); None stands for "nothing
to measure".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, Literal, NotRequired, TypeAlias, TypedDict, TypeVar

from tailreplay.report.gate_model import (
    Partial,
    ScopeRow,
    SloCell,
    SloMatrix,
    SloRow,
    SloScope,
    SloVerdict,
)
from tailreplay.traces.archive.replay_header import ReplaySettings
from tailreplay.traces.results.client_health import ClientVerdict
from tailreplay.traces.results.figures import METRICS, Metric

__all__ = [
    "METRICS",
    "BucketRow",
    "Cdf",
    "ClosedLoopRow",
    "DeltaFigures",
    "Deltas",
    "EngineReport",
    "ErrorKind",
    "Finding",
    "IdleRow",
    "LagCause",
    "Metric",
    "Metrics",
    "Partial",
    "PerSide",
    "Percentile",
    "Percentiles",
    "PhaseRow",
    "ReplaySettings",
    "Report",
    "Retries",
    "RouteRow",
    "ScopeRow",
    "Series",
    "Shadow",
    "ShardRow",
    "Shards",
    "SideName",
    "SideSummary",
    "SloCell",
    "SloMatrix",
    "SloRow",
    "SloScope",
    "SloVerdict",
    "SlowDown",
    "is_replay",
    "per_side",
    "side_items",
    "side_label",
]

T = TypeVar("T")

SideName: TypeAlias = Literal["recorded", "replayed"]

# Every metric a report (and an SLO) can name, in milliseconds: the shared definitions.


class PerSide(TypedDict, Generic[T]):
    """One value per side; a report of the replay alone has no ``recorded``."""

    recorded: NotRequired[T]
    replayed: T


def per_side(values: Mapping[SideName, T]) -> PerSide[T]:
    """``values`` (which must hold ``replayed``) as a PerSide, recorded first."""
    if "recorded" in values:
        return {"recorded": values["recorded"], "replayed": values["replayed"]}
    return {"replayed": values["replayed"]}


def side_items(values: PerSide[T]) -> list[tuple[SideName, T]]:
    """(side, value) for each side ``values`` holds, recorded first."""
    if "recorded" in values:
        return [("recorded", values["recorded"]), ("replayed", values["replayed"])]
    return [("replayed", values["replayed"])]


def side_label(report: Report, side: SideName) -> str:
    """What the text and HTML call a side. An archive reported alone that is not a
    replay's results (a capture, an import) is what was recorded: its figures are named
    "recorded", though the JSON keeps them under ``replayed`` (``replay.source`` says
    what the archive was made by). A shadow report's sides are production and shadow."""
    if "shadow" in report:
        return "production" if side == "recorded" else "shadow"
    if side == "replayed" and "recorded" not in report["overall"] and not is_replay(report):
        return "recorded"
    return side


def is_replay(report: Report) -> bool:
    """Are the report's ``replayed`` figures a replay's results? Only a replay has a
    client verdict (``Side.is_replay`` decides both)."""
    return report["client"] is not None


class Percentile(TypedDict):
    """One percentile's value and its 95% bootstrap interval."""

    value: float
    low: float | None
    """Lower end of the 95% bootstrap interval; None without one (ITL's histogram)."""
    high: float | None


Percentiles: TypeAlias = dict[str, Percentile]
"""Keyed by quantile name (``p50``, ``p95``, ``p99``, ``p999``)."""


class Metrics(TypedDict, total=False):
    """A side's percentiles per metric; None: nothing to measure.

    ``latency``, ``ttft`` and ``tpot`` are always there; ``latency_from_due`` only for
    a replay whose requests carry their dispatch lag; ``ttft_content`` only where an
    answer came after reasoning; ``itl`` only in ``overall``.
    """

    latency: Percentiles | None
    latency_from_due: Percentiles | None
    ttft: Percentiles | None
    ttft_content: Percentiles | None
    ttst: Percentiles | None
    """Time to the second token event, where streams had one."""
    tpot: Percentiles | None
    itl: Percentiles | None


class SideSummary(TypedDict):
    """One side's figures over a set of requests (all of them, or one bucket's)."""

    requests: int
    errors: int
    """Failed requests, but for those the client cut (``cancelled``): the target's."""
    error_rate: float | None
    """``errors`` over the requests the client did not cut."""
    cancelled: int
    """Requests the replayer cut in flight (Ctrl-C, ``--slo-stop``): neither a
    success nor the target's error."""
    throughput_rps: float | None
    """Successes per second of the side's whole window (first start to last end)."""
    output_tokens_per_s: float | None
    tail: int
    """Tail-stretched requests."""
    estimated_share: float | None
    """Share of the requests whose token counts were estimated, not reported by the server."""
    metrics: Metrics


class BucketRow(PerSide[SideSummary]):
    """One input-length bucket; a replayed request counts in its recorded original's."""

    range: str
    """The bucket's label: ``<50``, ``50-256``, ``>=2048``, or ``unknown``."""


class RouteRow(PerSide[SideSummary]):
    """One API route; a replayed request counts in its recorded original's (one without
    an original, in its own path's)."""

    route: str
    """``tailreplay.dialects.route_label`` of the path: a route a dialect serves
    (``/v1/chat/completions``, ``/v1/messages``, ...), ``/v1/models``, or ``other``."""


class PhaseRow(TypedDict):
    """The replayed requests due in one phase of a load shape (steps or pulses)."""

    phase: str
    """``step 2 2x``, ``base`` or ``pulse``."""
    seconds: float | None
    """Replay seconds the phase lasted (its throughput's window); None when unknown."""
    replayed: SideSummary


class ClosedLoopRow(TypedDict):
    """A closed-loop replay's requests of one user count and input-length bucket."""

    users: str
    """The step (``20 users``), or the run's one count."""
    range: str
    seconds: float | None
    """Seconds the step lasted (its throughput's window); None when unknown."""
    replayed: SideSummary


class Retries(TypedDict):
    """One side's retries: requests sent again after failing (``attempt`` >= 2)."""

    first_attempts: int
    retries: int
    attempts_per_request: float
    """(first attempts + retries) / first attempts: the retry amplification."""
    bin_s: float
    by_time: list[tuple[float, int, int]]
    """(``t_s`` from the side's first request, first attempts, retries) per ``bin_s``."""


class SlowDown(TypedDict):
    """One of the requests whose replay was slowest against its recorded original."""

    trace_id: str
    """Hex, like ``span_id``."""
    span_id: str
    input_tokens: int
    recorded_ms: float
    replayed_ms: float
    tail: bool


class Deltas(TypedDict):
    """Replayed minus recorded, request by request, over the pairs that both succeeded."""

    joined: int
    """Replayed requests with a recorded original (``unmatched``: without one)."""
    unmatched: int
    compared: int
    """Joined pairs where both sides succeeded with a latency: what the rest covers."""
    latency_delta_ms: dict[str, float] | None
    """Percentiles (by quantile name) of replayed minus recorded latency."""
    latency_ratio: dict[str, float] | None
    """Percentiles of replayed over recorded latency."""
    slower_share: float | None
    """The share of compared pairs whose replay took longer."""
    worst: list[SlowDown]
    """The largest slow-downs, largest first."""
    without_tail: NotRequired[DeltaFigures]
    """The same over the pairs whose request was not tail-stretched (only when some
    were): the stretched ones are slower by design."""
    same_length: NotRequired[DeltaFigures]
    """The same over the pairs, not tail-stretched, whose two answers have as many
    output tokens (only when some such pair's differ: a longer answer is slower
    whatever the speed, as a shadow's of another model or default length)."""


class DeltaFigures(TypedDict):
    """``Deltas``' figures over a subset of the pairs (``without_tail``, ``same_length``)."""

    compared: int
    latency_delta_ms: dict[str, float] | None
    latency_ratio: dict[str, float] | None
    slower_share: float | None
    worst: list[SlowDown]


class IdleRow(TypedDict):
    """One path's calls that generate nothing (``GET /v1/models``)."""

    call: str
    requests: int
    errors: int
    latency_p50_ms: float | None
    latency_p99_ms: float | None


class ErrorKind(TypedDict):
    """One kind of failure on one side (``http_400``, ``connect``, ...)."""

    kind: str
    count: int
    message: str | None
    """The first message the server gave with it (a replay's ``error_message``: one
    line, redacted); None when none came."""


class Series(TypedDict):
    """Per time bin of a side: requests started, latency P50/P99, dispatch lag P99."""

    bin_s: float | None
    """None when no request has a start time (then every list is empty)."""
    t_s: list[float]
    rate_rps: list[float]
    p50_ms: list[float | None]
    """None for a bin without a successful request, like the other percentile lists."""
    p99_ms: list[float | None]
    lag_p99_ms: list[float | None] | None
    """None for a recording (no dispatch schedule)."""


class ShardRow(TypedDict):
    """One shard of a sharded replay: its start behind schedule and its dispatch lag."""

    shard: int
    label: str
    """``i/N``, as ``--shard`` names it."""
    requests: int
    first_lag_ms: float | None
    """The lag of its first request sent: how far behind schedule it started. None (like
    the lags) when it sent nothing."""
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_p99_after_first_s_ms: float | None
    """Over its requests sent after the first second of its own sending: the lag a late
    start does not explain (None when it sent for less than a second)."""
    late: bool
    """Its first request went out more than ``Shards.late_start_s`` behind schedule."""
    catch_up: int
    """A late shard's requests sent before it was back on schedule, left out of the
    client verdict (0 for a shard that started on time)."""


LagCause: TypeAlias = Literal["late start", "client"]


class Shards(TypedDict):
    """The replayed side's shards, when it holds more than one (merged shards' results)."""

    count: int
    """N of ``i/N``."""
    late_start_s: float
    rows: list[ShardRow]
    late: list[str]
    """The labels of the shards that started late."""
    lag_p99_ms: float | None
    """Dispatch lag P99 over every request sent (``client`` has it without the catch-up)."""
    catch_up: int
    """Requests left out of the client verdict: the late shards' catch-up."""
    lag_cause: LagCause | None
    """Why the dispatch lag P99 over every request is above the limit: the late starts
    (the client kept up without them) or the client; None when it is within the limit."""


class Cdf(TypedDict):
    """Latency at fixed percentiles (both lists empty without a successful request)."""

    pct: list[float]
    ms: list[float]


class SeriesSummary(TypedDict):
    name: str
    min: float
    mean: float
    max: float


class Finding(TypedDict):
    rule: str
    text: str


class EngineReport(TypedDict):
    targets: list[str]
    pages: int
    failures: int
    series: dict[str, dict[str, list[float]]]
    """Common name -> ``t_s`` (from the replay's first request) and ``values``."""
    summary: list[SeriesSummary]
    findings: list[Finding]
    thresholds: dict[str, float]


class Report(TypedDict):
    """Recorded against replayed: what ``--json`` writes, key for key."""

    inputs: PerSide[list[str]]
    """Each side's archive paths."""
    replay: ReplaySettings
    overall: PerSide[SideSummary]
    buckets: list[BucketRow]
    routes: list[RouteRow]
    """One row per route either side has, most requests (both sides together) first."""
    phases: list[PhaseRow]
    """By the load shape's phase (replayed side only); empty for a constant speed or a ramp."""
    deltas: Deltas | None
    """None without a recorded side."""
    errors: PerSide[list[ErrorKind]]
    """Each side's failures by kind, most frequent first."""
    rate_scale: float | None
    """What the replay multiplied the recorded rates by: its speed (a ramp's mean) times
    ``--amplify``. Recorded throughput times this is what the target was asked to serve;
    None without a recorded side or a replay's speed."""
    series: PerSide[Series]
    cdf: PerSide[Cdf]
    warnings: list[str]
    client: ClientVerdict | None
    """Was the replaying client fast enough to measure the target? None: not a replay."""
    slo: NotRequired[SloMatrix]
    partial: NotRequired[Partial]
    """Present when the replay was cut short (``cut_short``, ``report/write.py``)."""
    unrelated: NotRequired[str]
    """Present, saying why, when objectives relative to the recording face a recorded
    archive none of whose requests the replay sent."""
    verdict: NotRequired[SloVerdict]
    """The SLO gate's verdict, with objectives (``report/verdict.py``)."""
    """Only when objectives were given."""
    engine: NotRequired[EngineReport]
    """The target's own metrics and findings, when the replay scraped them."""
    closed_loop: NotRequired[list[ClosedLoopRow]]
    """Only for a closed-loop replay (``--users``): by user count and input length."""
    retries: NotRequired[PerSide[Retries | None]]
    """Only when a side has retries; None for a side without."""
    shards: NotRequired[Shards]
    """Only when the replayed side holds more than one shard's results."""
    idle: NotRequired[PerSide[list[IdleRow]]]
    """Only when a side has calls that generate nothing (``idle_calls.py``): per path,
    not judged and in no other figure."""
    shadow: NotRequired[Shadow]
    """Only for ``report --shadow``: the ``recorded`` side is production (the requests
    that were copied), the ``replayed`` side the shadow's answers to the copies."""


class Shadow(TypedDict):
    """What a shadowed capture's header says of its shadow (``proxy --shadow``)."""

    target: str | None
    """The shadow's URL, credentials removed."""
    share: float | None
    """``--shadow-share``: the share of production's generating requests to copy."""
    sent: NotRequired[float]
    """The share of production's generating requests in these files that was copied:
    less than ``share`` when the proxy did not send some (the shadow down or full)."""
