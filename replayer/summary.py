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

from tailreplay.traces.record import Record, is_error

__all__ = ["ResultCollector", "summary_lines"]

_PCTS = {"p50": 50.0, "p95": 95.0, "p99": 99.0}


def _summary(values: array[Any], scale: float) -> dict[str, float] | None:
    if not values:
        return None
    data = np.frombuffer(values, dtype=np.int64 if values.typecode == "q" else np.float64) * scale
    out = {
        k: float(v) for k, v in zip(_PCTS, np.percentile(data, list(_PCTS.values())), strict=True)
    }
    out["max"] = float(data.max())
    return out


@dataclass
class ResultCollector:
    tail_factor: float
    tail_quantile: float
    requests: int = 0
    ok: int = 0
    tail: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latency_ns: array[int] = field(default_factory=lambda: array("q"))
    service_ns: array[int] = field(default_factory=lambda: array("q"))
    ttft_ns: array[int] = field(default_factory=lambda: array("q"))
    tpot_ns: array[float] = field(default_factory=lambda: array("d"))
    lag_ns: array[int] = field(default_factory=lambda: array("q"))
    first_sent_ns: int | None = None
    last_done_ns: int | None = None

    def add(self, r: Record) -> None:
        self.requests += 1
        self.tail += bool(r.tail)
        if r.lag_ns is not None:
            self.lag_ns.append(r.lag_ns)
        if r.sent_ns is not None:
            self.first_sent_ns = min(self.first_sent_ns or r.sent_ns, r.sent_ns)
            end = r.sent_ns + (r.duration_ns or 0)
            self.last_done_ns = max(self.last_done_ns or end, end)
        if r.error == "dropped":
            return  # counted by the dispatcher, reported as "dropped"
        if is_error(r.status, r.error):
            self.errors[r.error or f"http_{r.status}"] += 1
            return
        self.ok += 1
        if r.duration_ns is not None:
            self.service_ns.append(r.duration_ns)
            self.latency_ns.append(r.duration_ns + max(r.lag_ns or 0, 0))
        if r.ttfb_ns is not None and r.stream:
            self.ttft_ns.append(r.ttfb_ns)
            if r.output_tokens and r.output_tokens > 1 and r.duration_ns is not None:
                self.tpot_ns.append((r.duration_ns - r.ttfb_ns) / (r.output_tokens - 1))

    def summary(self, sent: int, dropped: int) -> dict[str, Any]:
        duration_s = (
            (self.last_done_ns - self.first_sent_ns) / 1e9
            if self.first_sent_ns is not None and self.last_done_ns is not None
            else 0.0
        )
        return {
            "requests": self.requests,
            "sent": sent,
            "completed": self.ok,
            "errors": dict(self.errors),
            "dropped": dropped,
            "duration_s": duration_s,
            "throughput_rps": self.ok / duration_s if duration_s > 0 else None,
            "latency_ms": _summary(self.latency_ns, 1e-6),
            "service_ms": _summary(self.service_ns, 1e-6),
            "ttft_ms": _summary(self.ttft_ns, 1e-6),
            "tpot_ms": _summary(self.tpot_ns, 1e-6),
            "lag_ms": _summary(self.lag_ns, 1e-6),
            "tail": {
                "count": self.tail,
                "factor": self.tail_factor,
                "quantile": self.tail_quantile,
            },
        }


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The summary as ``replay`` prints it: counts, throughput, percentiles, tail."""
    errors = ", ".join(f"{k} {v:,}" for k, v in sorted(s["errors"].items())) or "none"
    rate = s["throughput_rps"]
    lines = [
        f"requests {s['requests']:,}  sent {s['sent']:,}  completed {s['completed']:,}  "
        f"dropped {s['dropped']:,}  errors: {errors}",
        f"duration {s['duration_s']:.1f} s  throughput {rate:,.1f} req/s"
        if rate
        else f"duration {s['duration_s']:.1f} s",
    ]
    for name, key in (("latency", "latency_ms"), ("service", "service_ms"), ("TTFT", "ttft_ms"),
                      ("TPOT", "tpot_ms"), ("lag", "lag_ms")):  # fmt: skip
        if p := s.get(key):
            cells = "  ".join(f"{q} {p[q]:9.1f}" for q in ("p50", "p95", "p99", "max"))
            lines.append(f"  {name:<10} {cells} ms")
    t = s["tail"]
    quantile = f"P{t['quantile'] * 100:g}"
    lines.append(f"tail: {t['count']:,} requests at or above {quantile}, output x{t['factor']:g}")
    if "input_tokens_error" in s:
        error = s["input_tokens_error"] * 100
        lines.append(f"input tokens vs recorded: {error:+.2f}% (as the target counts them)")
    return lines
