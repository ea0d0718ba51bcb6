"""Calls that generate nothing — an SDK's ``GET /v1/models``, health checks, a
tokenizer endpoint — kept apart from the requests a report judges.

Their latency is a lookup's, not a generation's, and they have no input length:
judged with the rest, they fell into an "unknown" bucket and missed SLOs set for
generations. A report lists them per path (requests, errors, latency P50 and P99)
and judges them only when asked (``--slo-by path`` classes every request by its
path, these included).

Which calls generate nothing is ``tailreplay.openai_api.generates_nothing``'s to say.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailreplay.openai_api import call_name
from tailreplay.report.model import IdleRow

__all__ = ["IdleCalls"]


@dataclass
class _Path:
    requests: int = 0
    errors: int = 0
    durations_ns: array[int] = field(default_factory=lambda: array("q"))


@dataclass
class IdleCalls:
    """Per path (without its query string): how many, how many failed, how long."""

    paths: dict[str, _Path] = field(default_factory=dict)
    keys: set[bytes] = field(default_factory=set)
    """The calls' identities: a recorded side is read for the replayed ones too."""

    def add(
        self, method: str, path: Any, failed: bool, duration_ns: Any, key: bytes | None
    ) -> None:
        if key is not None:
            self.keys.add(key)
        name = call_name(method, path)
        row = self.paths.setdefault(name, _Path())
        row.requests += 1
        row.errors += failed
        if not failed and type(duration_ns) is int and duration_ns >= 0:
            row.durations_ns.append(duration_ns)

    def rows(self) -> list[IdleRow]:
        """Per path, most called first: requests, errors, latency P50 and P99 (ms)."""
        out: list[IdleRow] = []
        for name, p in sorted(self.paths.items(), key=lambda kv: (-kv[1].requests, kv[0])):
            ms = np.frombuffer(p.durations_ns, dtype=np.int64) / 1e6 if p.durations_ns else None
            out.append(
                {
                    "call": name,
                    "requests": p.requests,
                    "errors": p.errors,
                    "latency_p50_ms": float(np.percentile(ms, 50)) if ms is not None else None,
                    "latency_p99_ms": float(np.percentile(ms, 99)) if ms is not None else None,
                }
            )
        return out
