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

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.openai_api import call_name
from tailreplay.report.model import IdleRow
from tailreplay.report.request_keys import KEY

Array = npt.NDArray[Any]
Mask = npt.NDArray[np.bool_]

__all__ = ["IdleCalls"]


@dataclass
class _Path:
    requests: int = 0
    errors: int = 0
    durations_ns: list[Array] = field(default_factory=list)


@dataclass
class IdleCalls:
    """Per path (without its query string): how many, how many failed, how long."""

    paths: dict[str, _Path] = field(default_factory=dict)
    key_parts: list[Array] = field(default_factory=list)
    """The calls' identities (``request_keys.KEY``): a recorded side is read for the
    replayed ones too."""

    @property
    def keys(self) -> Array:
        return np.concatenate(self.key_parts) if self.key_parts else np.zeros(0, dtype=KEY)

    def add(self, method: str, path: Any, failed: Mask, duration_ns: Array) -> None:
        """Calls of one method and path: whether each failed, and its duration (-1: none)."""
        row = self.paths.setdefault(call_name(method, path), _Path())
        row.requests += int(failed.size)
        row.errors += int(failed.sum())
        row.durations_ns.append(duration_ns[~failed & (duration_ns >= 0)])

    def merge(self, other: IdleCalls) -> None:
        """Add the calls ``other`` holds (read after these)."""
        for name, p in other.paths.items():
            row = self.paths.setdefault(name, _Path())
            row.requests += p.requests
            row.errors += p.errors
            row.durations_ns += p.durations_ns
        self.key_parts += other.key_parts

    def rows(self) -> list[IdleRow]:
        """Per path, most called first: requests, errors, latency P50 and P99 (ms)."""
        out: list[IdleRow] = []
        for name, p in sorted(self.paths.items(), key=lambda kv: (-kv[1].requests, kv[0])):
            durations = np.concatenate(p.durations_ns) if p.durations_ns else np.zeros(0)
            ms = durations / 1e6 if durations.size else None
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
