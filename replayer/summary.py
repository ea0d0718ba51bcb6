"""The replay's summary: folded from each result record as it comes, read as lines after.

``ResultCollector`` keeps only numbers (compact arrays), so the summary of a
long replay costs a few bytes a request; the records themselves go to the
result archive. ``summary_lines`` is the summary as ``replay`` prints it.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.openai_api import call_name, calls_that_generate_nothing, generates_nothing
from tailreplay.replayer.replay_summary import (
    Percentiles,
    ReplaySummary,
    TailSummary,
)
from tailreplay.replayer.schedule import Plan, ScheduleConfig
from tailreplay.traces.archive.record import Record
from tailreplay.traces.results.client_health import verdict_line
from tailreplay.traces.results.figures import Metric, Requests, is_error, metric_values, percentiles
from tailreplay.traces.results.log_histogram import LogHistogram

__all__ = ["ResultCollector", "mark_unsent", "summary_lines"]

Array = npt.NDArray[Any]

_PCTS = {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
_GAP_FLUSH = 1 << 16
"""Inter-token gaps gathered before they go into the histogram at once."""
_COLUMNS = ("duration_ns", "ttfb_ns", "ttft_content_ns", "lag_ns", "output_tokens")
_SHOWN: tuple[tuple[str, Metric], ...] = (
    ("latency", "latency"),
    ("from due", "latency_from_due"),
    ("TTFT", "ttft"),
    ("to answer", "ttft_content"),
    ("TPOT", "tpot"),
    ("ITL", "itl"),
)
"""The summary's rows: a label and the shared metric it shows."""


def lag_percentiles(lags_ns: Array) -> Percentiles | None:
    """The dispatch lag's P50/P95/P99 and maximum (ms) of every send (sent - due)."""
    return _summary(lags_ns * 1e-6)


def _summary(values: Array) -> Percentiles | None:
    """P50/P95/P99 and the maximum of ``values`` (ms), or None when there are none."""
    out = percentiles(values, _PCTS)
    if out is None:
        return None
    return Percentiles(out["p50"], out["p95"], out["p99"], float(values.max()), out["p999"])


def _binned(itl: LogHistogram) -> Percentiles | None:
    """The percentiles of gaps (µs) held in 1% bins, in ms."""
    out = itl.percentiles(_PCTS)
    if out is None:
        return None
    ms = {name: value / 1e3 for name, value in out.items()}
    return Percentiles(ms["p50"], ms["p95"], ms["p99"], itl.max() / 1e3, ms["p999"])


def _int(value: int | None) -> int:
    return -1 if value is None else value


@dataclass
class ResultCollector:
    """The replay's figures so far, a few compact arrays: each request's columns of the
    shared metric definitions (tailreplay.traces.results.figures), and every dispatch lag."""

    tail_stretch: float
    tail_quantile: float
    timings: bool = True
    """Keep each request's columns; a dry run, which has no timings, only counts
    (a 4M-request plan would otherwise hold 170 MB of placeholders)."""
    tail_by: str | None = None
    """What chose the tail (``Plan.tail_by``)."""
    tail_capped: int = 0
    """Tail budgets cut to fit ``context`` (``Plan.capped``)."""
    context: int | None = None
    """The target's context in tokens, when known."""
    requests: int = 0
    ok: int = 0
    tail: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    messages: dict[str, str] = field(default_factory=dict)
    """The target's first message for each error kind that came with one."""
    columns: dict[str, array[int]] = field(
        default_factory=lambda: {name: array("q") for name in _COLUMNS}
    )
    stream: array[int] = field(default_factory=lambda: array("b"))
    failed: array[int] = field(default_factory=lambda: array("b"))
    dispatch_lag_ns: array[int] = field(default_factory=lambda: array("q"))
    first_sent_ns: int | None = None
    last_done_ns: int | None = None

    retries: int = 0
    """Results of attempts after the first (``--retries policy``)."""
    aborts_answered: int = 0
    """Recorded client aborts replayed whose answer had begun (a status read) when the
    client left."""
    idle: Counter[str] = field(default_factory=Counter)
    """Calls that generate nothing, per method and path: counted apart, in no figure."""
    idle_sent: int = 0
    itl: LogHistogram = field(default_factory=LogHistogram)
    """The inter-token gaps (µs) of successful streams, as the report bins them."""
    gaps: array[int] = field(default_factory=lambda: array("q"))
    """Gaps not yet in ``itl``: a request's are appended, a batch is binned at once."""

    def add(self, r: Record) -> None:
        if generates_nothing(r.method, r.path):
            self.idle[call_name(r.method or "", r.path)] += 1
            self.idle_sent += r.sent_ns is not None
            return
        self.requests += 1
        self.retries += (r.attempt or 1) > 1
        self.tail += bool(r.tail)
        if r.lag_ns is not None:
            self.dispatch_lag_ns.append(r.lag_ns)
        if r.sent_ns is not None:
            self.first_sent_ns = min(self.first_sent_ns or r.sent_ns, r.sent_ns)
            end = r.sent_ns + (r.duration_ns or 0)
            self.last_done_ns = max(self.last_done_ns or end, end)
        # A dropped request (never sent: no slot) is an error of its own kind here as
        # in the report and ``traces stats``; the dispatcher counts it as "dropped" too.
        failed = is_error(r.status, r.error)
        if failed:
            kind = r.error or f"http_{r.status}"
            self.errors[kind] += 1
            self.aborts_answered += kind == "client_abort" and bool(r.status)
            if r.error_message and kind not in self.messages:
                self.messages[kind] = r.error_message
        else:
            self.ok += 1
        if not self.timings:
            return
        c = self.columns
        c["duration_ns"].append(_int(r.duration_ns))
        c["ttfb_ns"].append(_int(r.ttfb_ns))
        c["ttft_content_ns"].append(_int(r.ttft_content_ns))
        c["lag_ns"].append(_int(r.lag_ns))
        c["output_tokens"].append(_int(r.output_tokens))
        self.stream.append(r.stream is True)
        self.failed.append(failed)
        if r.chunk_gaps_us and not failed:
            self.gaps.extend(r.chunk_gaps_us)
            if r.chunk_gaps_more:
                self.itl.add_bins(r.chunk_gaps_more)
            if len(self.gaps) >= _GAP_FLUSH:
                self._bin_gaps()

    def _bin_gaps(self) -> None:
        if self.gaps:
            self.itl.add(np.frombuffer(self.gaps, dtype=np.int64))
            self.gaps = array("q")

    def requests_view(self) -> Requests:
        """The collected columns as the shared metric definitions read them."""
        col = {
            name: np.frombuffer(a, dtype=np.int64) if a else np.zeros(0, np.int64)
            for name, a in self.columns.items()
        }
        flags = [
            np.frombuffer(a, dtype=np.int8).astype(bool) if a else np.zeros(0, bool)
            for a in (self.stream, self.failed)
        ]
        return Requests(**col, stream=flags[0], error=flags[1])

    def summary(self, sent: int, dropped: int) -> ReplaySummary:
        duration_s = (
            (self.last_done_ns - self.first_sent_ns) / 1e9
            if self.first_sent_ns is not None and self.last_done_ns is not None
            else 0.0
        )
        values = metric_values(self.requests_view())
        lag = np.frombuffer(self.dispatch_lag_ns, dtype=np.int64) * 1e-6
        self._bin_gaps()

        def of(metric: Metric) -> Percentiles | None:
            return _summary(values[metric]) if metric in values else None

        return ReplaySummary(
            requests=self.requests - self.retries,
            attempts=self.requests,
            sent=sent - self.idle_sent,
            completed=self.ok,
            aborts_answered=self.aborts_answered,
            errors=dict(self.errors),
            error_messages=dict(self.messages),
            dropped=dropped,
            duration_s=duration_s,
            throughput_rps=self.ok / duration_s if duration_s > 0 else None,
            latency_ms=of("latency"),
            latency_from_due_ms=of("latency_from_due"),
            ttft_ms=of("ttft"),
            ttft_content_ms=of("ttft_content"),
            tpot_ms=of("tpot"),
            itl_ms=_binned(self.itl),
            lag_ms=_summary(lag),
            retries=self.retries,
            idle_calls=dict(self.idle),
            tail=TailSummary(
                count=self.tail,
                factor=self.tail_stretch,
                quantile=self.tail_quantile,
                by=self.tail_by,
                capped=self.tail_capped,
                context=self.context,
            ),
        )


def summary_lines(s: ReplaySummary) -> list[str]:
    """The summary as ``replay`` prints it: counts, throughput, percentiles, tail."""
    tail = _tail_line(s.tail)
    idle = _idle_line(s.idle_calls)
    if s.dry_run:
        return [f"dry run: {s.attempts:,} requests planned, none sent", *idle, tail]
    # Cut by the client (Ctrl-C, --slo-stop), not failed by the target: shown apart.
    kinds = sorted((k, v) for k, v in s.errors.items() if k != "cancelled")
    errors = ", ".join(f"{k} {v:,}" for k, v in kinds) or "none"
    cancelled = s.errors.get("cancelled", 0)
    cut = f"  cancelled by the client {cancelled:,}" if cancelled else ""
    rate = s.throughput_rps
    lines = [
        *_how_it_ended(s),
        f"requests {s.requests:,}{f' ({s.attempts:,} attempts)' if s.retries else ''}  "
        f"sent {s.sent:,}  completed {s.completed:,}  "
        f"dropped {s.dropped:,}  errors: {errors}{cut}",
        *(f"  {kind}: {text}" for kind, text in sorted(s.error_messages.items())),
        *idle,
        f"duration {s.duration_s:.1f} s  throughput {rate:,.1f} req/s"
        if rate
        else f"duration {s.duration_s:.1f} s",
    ]
    if e := s.prompt_entropy:
        lines.append(
            f"synthetic prompts' entropy: asked {e.intended_bits:.2f} bits/token, "
            f"drawn {e.achieved_bits:.2f} (mean of {e.prompts:,})"
        )
    if retries := s.retries:
        first = s.requests
        lines.append(
            f"retries {retries:,}: {s.attempts / max(first, 1):.2f} attempts per "
            f"request ({first:,} first attempts)"
        )
    shown = [(label, getattr(s, f"{metric}_ms")) for label, metric in _SHOWN]
    for name, p in [*shown, ("lag", s.lag_ms)]:  # lag: sent - due, each send
        if p is not None:
            cells = "  ".join(f"{q} {getattr(p, q):9.1f}" for q in ("p50", "p95", "p99"))
            cells += f"  p99.9 {p.p999:9.1f}" if p.p999 is not None else ""
            lines.append(f"  {name:<10} {cells}  max {p.max:9.1f} ms")
    lines.append(tail)
    if s.client is not None:
        lines.append(verdict_line(s.client))
    if s.input_tokens_error is not None:
        error = s.input_tokens_error * 100
        percent = f"{error:+.2f}" if round(error, 2) != 0 else "0.00"  # never "-0.00"
        lines.append(f"input tokens vs recorded: {percent}% (as the target counts them)")
    return lines


def _idle_line(idle: dict[str, int]) -> list[str]:
    """The calls that generate nothing, when there were any: apart, as in the report."""
    if not idle:
        return []
    calls = ", ".join(f"{name} {n:,}" for name, n in sorted(idle.items(), key=lambda kv: -kv[1]))
    what = calls_that_generate_nothing(sum(idle.values()))
    return [f"and {what} ({calls}): in no count or figure here"]


def _how_it_ended(s: ReplaySummary) -> list[str]:
    """The lines before the counts: Ctrl-C, --slo-stop, --duration."""
    head = [_interrupted_line(s)] if s.interrupted else []
    if s.slo_stop:
        cut = f"{s.errors.get('cancelled', 0):,} in flight cancelled"
        sent = (
            f"stopped after {s.due or 0:,} of {s.scheduled or 0:,} due, {s.unsent:,} never sent"
            if s.unsent
            else "stopped once all was sent"
        )
        head.append(f"--slo-stop: {sent}; {cut}")
    if s.duration_limit_s is not None and not s.interrupted:
        never = f"; {s.unsent or 0:,} of {s.scheduled:,} never sent" if s.scheduled else ""
        head.append(f"--duration {s.duration_limit_s:g}s: sending stopped there{never}")
    return head


_MEASURES = {"duration_ns": "latency", "service_demand": "service demand"}


def _tail_line(t: TailSummary) -> str:
    """How many were stretched, by what measure, and how many the context cut short."""
    if t.factor == 1:
        return "tail: off (--tail-stretch 1)"  # as the run table says
    if t.by is None and not t.count:
        return "tail: none (the archive records neither latencies nor token counts)"
    by = f" of {_MEASURES[t.by]}" if t.by in _MEASURES else ""
    noun = "request" if t.count == 1 else "requests"
    line = f"tail: {t.count:,} {noun} at or above P{t.quantile * 100:g}{by}, "
    line += f"output x{t.factor:g}"
    if t.capped:
        line += f" ({t.capped:,} cut to fit the {t.context or 0:,}-token context)"
    return line


def _interrupted_line(s: ReplaySummary) -> str:
    if s.scheduled is None:
        return f"interrupted after {s.due or 0:,} due ({s.sent:,} sent); the rest never sent"
    return f"interrupted after {s.due or 0:,} of {s.scheduled:,} due; {s.unsent or 0:,} never sent"


def mark_unsent(
    s: ReplaySummary,
    sc: ScheduleConfig,
    the_plan: Plan,
    due: int,
    sent: int,
    *,
    interrupted: bool = True,
) -> None:
    """What a run stopped early did not do: the schedule's size is exact when one process
    replays all of it with whole copies (else only the due count is known)."""
    exact = sc.shard[1] == 1 and sc.amplify == int(sc.amplify)
    s.scheduled = the_plan.count * int(sc.amplify) if exact else None
    s.unsent = s.scheduled - sent if s.scheduled is not None else None
    s.interrupted, s.due = interrupted, due
