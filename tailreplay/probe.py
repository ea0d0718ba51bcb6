"""The header on tailreplay's own probe request, which the proxy forwards but never
records: a replay through the proxy captures the replayed traffic, not the replayer's
check that the target answers (docs/proxy.md)."""

from __future__ import annotations

__all__ = ["PROBE_HEADER"]

PROBE_HEADER = "X-Tailreplay-Preflight"
