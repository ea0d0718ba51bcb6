"""A fitted profile's account of its own input: the calibration's requests served again
by the offline engine (``offline_engine``), each arriving when it was sent with the
lengths it had, and their TTFT and latency set against what was measured.

This is the twin's test on the one window where the truth is known: a calibration
picks between the ways an engine may send its first token by how far each request's
TTFT comes from its own, and says how far the twin's percentiles are from the
window's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailreplay.sim.calibration_data import Array, Observed
from tailreplay.sim.offline_engine import OfflineRequest, Served, serve_offline
from tailreplay.sim.profiles import EngineProfile

__all__ = ["WindowErrors", "served_again"]


@dataclass(frozen=True)
class WindowErrors:
    """The twin against the window: relative errors (twin / measured - 1) of the P50 and
    P99 of TTFT and latency over the streamed requests, and the mean of each request's
    |twin - measured| TTFT in ms."""

    ttft_p50: float
    ttft_p99: float
    latency_p50: float
    latency_p99: float
    ttft_request_ms: float
    """What picks the way an engine sends its first token. Request by request, not a
    percentile: the requests that found the engine idle, often most, come out alike
    either way, and those where one prompt met another's prefill (hundreds of ms
    apart between the ways) decide; a percentile of 55 or 100 requests can match by
    chance with the wrong requests under it."""


def served_again(o: Observed, p: EngineProfile) -> WindowErrors:
    """``o``'s streamed requests served by ``p`` offline: each at its send time, its
    prompt the tokens the engine computed (input less cached: the offline prompt shares
    no prefix), its output as answered."""
    streamed = np.flatnonzero(o.streamed)
    # The engine takes them in arrival order; results are written as they end.
    streamed = streamed[np.argsort(o.start_s[streamed], kind="stable")]
    prompts = np.maximum(o.uncached_tokens[streamed], 1)
    outputs = np.maximum(o.output_tokens[streamed], 1)
    requests = (
        (j, OfflineRequest(float(o.start_s[i]), int(prompts[j]), int(outputs[j])))
        for j, i in enumerate(streamed)
    )
    ttft = np.full(len(streamed), np.nan)
    latency = np.full(len(streamed), np.nan)

    def emit(batch: list[tuple[int, Served]]) -> None:
        for j, served in batch:
            if served.status == 200 and served.token_s:
                ttft[j], latency[j] = served.token_s[0], served.token_s[-1]

    serve_offline(p, iter(requests), emit)
    measured_ttft = o.ttft_s[streamed]
    measured_latency = o.last_token_s[streamed] - o.start_s[streamed]
    return WindowErrors(
        ttft_p50=_error(ttft, measured_ttft, 50),
        ttft_p99=_error(ttft, measured_ttft, 99),
        latency_p50=_error(latency, measured_latency, 50),
        latency_p99=_error(latency, measured_latency, 99),
        ttft_request_ms=_mean_ms(np.abs(ttft - measured_ttft)),
    )


def _error(twin: Array, measured: Array, q: float) -> float:
    """The twin's percentile ``q`` against the measured one, as twin / measured - 1; NaN
    where either has no value or the measured one is 0 (no error can be read)."""
    twin, measured = twin[np.isfinite(twin)], measured[np.isfinite(measured)]
    if not len(twin) or not len(measured):
        return float("nan")
    of = float(np.percentile(measured, q))
    return float(np.percentile(twin, q)) / of - 1 if of > 0 else float("nan")


def _mean_ms(seconds: Array) -> float:
    """The mean of the finite values, in ms; NaN without any (the twin served none)."""
    finite = seconds[np.isfinite(seconds)]
    return float(finite.mean()) * 1e3 if len(finite) else float("nan")
