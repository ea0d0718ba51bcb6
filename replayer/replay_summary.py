"""A replay's summary: the one definition of its fields, as ``replay`` prints it, writes
it (``--json``) and the Python API returns it.

``ResultCollector.summary`` (``summary.py``) makes one from the results; the run adds
how it ended (interrupted, stopped, cut by ``--duration``) and the client's verdict.
``to_json`` is the ``--json`` document: every field below by its name, the optional
ones only when set.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tailreplay.traces.results.client_health import ClientVerdict

__all__ = ["Percentiles", "PromptEntropy", "ReplaySummary", "TailSummary"]


@dataclass(frozen=True)
class Percentiles:
    """One figure's P50, P95, P99, maximum and P99.9 over the run, in ms."""

    p50: float
    p95: float
    p99: float
    max: float
    p999: float | None = None


@dataclass(frozen=True)
class TailSummary:
    """The tail stretch: how many requests it took and how."""

    count: int
    factor: float
    """``--tail-stretch``: the tail's output budget factor."""
    quantile: float
    by: str | None
    """What chose the tail: ``duration_ns`` (recorded latency), ``service_demand``, or
    None (the archive records neither)."""
    capped: int
    """Tail budgets cut to fit the target's context."""
    context: int | None


@dataclass(frozen=True)
class PromptEntropy:
    """Synthetic prompts' token entropy: asked for (the recording's) and drawn."""

    prompts: int
    intended_bits: float
    achieved_bits: float


@dataclass
class ReplaySummary:
    """What one replay did: counts, timings (ms) of what was answered, and how it ended."""

    requests: int
    """Requests due: each counted once, however many attempts it took."""
    attempts: int
    """Results: every attempt (``requests`` plus ``retries``)."""
    sent: int
    completed: int
    """Answered without error."""
    errors: dict[str, int]
    """Failures by kind (``http_503``, ``upstream_timeout``, ``client_abort``...)."""
    error_messages: dict[str, str]
    """The target's first message for each kind that came with one."""
    dropped: int
    """Never sent: no in-flight slot within 100 ms of the due time (``--max-inflight``)."""
    duration_s: float
    """First send to last answer."""
    throughput_rps: float | None
    latency_ms: Percentiles | None
    latency_from_due_ms: Percentiles | None
    ttft_ms: Percentiles | None
    ttft_content_ms: Percentiles | None
    tpot_ms: Percentiles | None
    lag_ms: Percentiles | None
    """Dispatch lag: how late each request left against its due time."""
    retries: int
    tail: TailSummary
    client: ClientVerdict | None = None
    """Whether the client kept up (None: a dry run, which measures nothing)."""
    dry_run: bool | None = None
    interrupted: bool | None = None
    """True after Ctrl-C; False when ``--slo-stop`` stopped the run (then ``due``,
    ``scheduled`` and ``unsent`` say what was not sent); None when neither."""
    due: int | None = None
    scheduled: int | None = None
    """Requests in the whole schedule, when one process knows them (else None)."""
    unsent: int | None = None
    duration_limit_s: float | None = None
    """``--duration``, when it cut the schedule short."""
    aborted: str | None = None
    """Why the run stopped itself (``--fail-fast``, ``--slo-stop``)."""
    slo_stop: str | None = None
    """The objective ``--slo-stop`` saw missed."""
    input_tokens_error: float | None = None
    """Prompt tokens as the target counted them against the recording's, minus 1."""
    prompt_entropy: PromptEntropy | None = None
    workers: int | None = None
    itl_ms: Percentiles | None = None
    """Inter-token latency: the gaps between the token events of successful streams,
    from 1%-wide bins as the report reads them (each percentile its bin's middle, the
    maximum its bin's upper end)."""
    left_out: int = 0
    """Records in the window left out before the run, as impossible to rebuild: POSTs to
    routes no dialect serves, captured without their bodies. Not in ``requests``."""
    idle_calls: dict[str, int] = field(default_factory=dict)
    """Calls that generate nothing (``GET /v1/models``, tokenizer routes), per method and
    path: sent as recorded, but kept out of every count and figure above, as ``report``
    keeps them apart (``tailreplay.openai_api.generates_nothing``)."""
    aborts_answered: int = 0
    """Of the ``client_abort`` errors, those whose answer had begun when the client
    left (as recorded): the target answered them."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Added by the command after the run (``slo``: the gate's verdict)."""

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: every field by name, optional ones only when set."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None and f.default is None and not self._stated(f.name):
                continue
            out[f.name] = asdict(value) if hasattr(value, "__dataclass_fields__") else value
        return {**out, **self.extra}

    def _stated(self, name: str) -> bool:
        """``scheduled`` and ``unsent`` are written, null when unknown, wherever the run
        says what it did not send (interrupted, stopped, cut by ``--duration``)."""
        cut = self.interrupted is not None or self.duration_limit_s is not None
        return name in ("scheduled", "unsent") and cut

    @property
    def answered(self) -> int:
        """Requests answered: completed, and recorded client aborts replayed whose
        answer had begun when the client left (one the target had not begun to answer
        was not answered)."""
        return self.completed + self.aborts_answered

    @staticmethod
    def before_start_json() -> dict[str, Any]:
        """``--json`` of a run interrupted before its first request was due."""
        return {"interrupted": True, "due": 0, "sent": 0}
