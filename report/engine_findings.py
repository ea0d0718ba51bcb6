"""The target's own metrics during a replay (``replay --scrape``), and what they say.

``RESULTS.scrape.msgpack`` beside a result archive holds the pages read during
the run (``replayer/scrape.py``). Their series are put on the replay's time axis
(seconds from its first request, as every other plot), summarised, and turned
into findings by the rules below, each threshold overridable
(``report --thresholds waiting=80,kv_cache=0.95``):

- **admission or prefill bound**: requests waiting > ``waiting`` (50) while
  running < ``running`` (8): the engine is not admitting work it has room for;
- **memory bound**: KV-cache usage > ``kv_cache`` (0.92), or preemptions during
  the run: sequences are evicted to make room;
- **cache bound**: prefix-cache hit rate < ``hit_rate`` (0.65) over the run while
  the median prompt is at least ``long_input`` (2,048) tokens: long prompts are
  prefilled again and again;
- **outside the engine**: none of these while latency rose (the last half's P99
  at least ``latency_rise`` (1.5) times the first half's): look at the network,
  a gateway, or the client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from tailreplay.engine_metrics import scrape_path
from tailreplay.report.model import EngineReport, Finding
from tailreplay.report.side import Side
from tailreplay.traces.results.figures import per_request

__all__ = ["THRESHOLDS", "EngineReport", "engine_report", "findings", "parse_thresholds"]

THRESHOLDS: dict[str, float] = {
    "waiting": 50,
    "running": 8,
    "kv_cache": 0.92,
    "hit_rate": 0.65,
    "long_input": 2048,
    "latency_rise": 1.5,
}
SHOWN = (
    "waiting",
    "running",
    "kv_cache_usage",
    "prefix_cache_hit_rate",
    "preemptions",
    "gpu_memory_used_mib",
    "gpu_utilization",
)
MAX_POINTS = 600


def parse_thresholds(pairs: Sequence[tuple[str, str]]) -> dict[str, float]:
    """``THRESHOLDS`` with the given ``name=value`` pairs in place."""
    from tailreplay.errors import UsageError

    out = dict(THRESHOLDS)
    for name, value in pairs:
        if name not in out:
            raise UsageError(f"--thresholds {name}: not one of {', '.join(THRESHOLDS)}")
        try:
            out[name] = float(value)
        except ValueError:
            raise UsageError(f"--thresholds {name}={value}: not a number") from None
    return out


def engine_report(
    results: Sequence[Path], side: Side, thresholds: dict[str, float] | None = None
) -> EngineReport | None:
    """The target's metrics beside ``results`` (None when none were scraped)."""
    pages: list[dict[str, Any]] = []
    targets: list[str] = []
    failures = 0
    for path in results:
        header, found = _read(scrape_path(Path(path)))
        if header is not None:
            targets += [str(t.get("url")) for t in header.get("targets", [])]
            failures += sum(int(n) for n in (header.get("failures") or {}).values())
            pages += found
    if not targets:
        return None
    starts = side.start_ns[side.start_ns >= 0]
    t0 = int(starts.min()) if starts.size else min((p["t_ns"] for p in pages), default=0)
    series = _series(pages, t0)
    limits = thresholds or THRESHOLDS
    return {
        "targets": targets,
        "pages": len(pages),
        "failures": failures,
        "series": {k: v for k, v in series.items() if k in SHOWN},
        "summary": [
            {
                "name": k,
                "min": min(v["values"]),
                "mean": float(np.mean(v["values"])),
                "max": max(v["values"]),
            }
            for k, v in series.items()
            if k in SHOWN
        ],
        "findings": findings(series, side, limits),
        "thresholds": limits,
    }


def _read(path: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The header and pages of a scrape file; (None, []) when there is none or it is
    not one (a damaged tail keeps the pages before it)."""
    pages: list[dict[str, Any]] = []
    header = None
    with contextlib.suppress(OSError), path.open("rb") as f:
        unpacker = msgpack.Unpacker(f, raw=False, max_buffer_size=64 * 2**20)
        with contextlib.suppress(ValueError, msgpack.UnpackException):
            for m in unpacker:
                if header is None:
                    if not isinstance(m, dict) or m.get("format") != "tailreplay-scrape":
                        return None, []
                    header = m
                elif (
                    isinstance(m, dict)
                    and isinstance(m.get("t_ns"), int)
                    and isinstance(m.get("series"), dict)
                ):
                    pages.append(m)
    return header, pages


def _series(pages: list[dict[str, Any]], t0: int) -> dict[str, dict[str, list[float]]]:
    """Common series on the replay's axis; counters' hit rate derived; at most
    MAX_POINTS points each (every n-th page)."""
    pages = sorted(pages, key=lambda p: p["t_ns"])
    step = max(1, len(pages) // MAX_POINTS)
    out: dict[str, dict[str, list[float]]] = {}
    for name in (*SHOWN, "prefix_cache_hits", "prefix_cache_queries"):
        kept = [
            (p["t_ns"], float(p["series"][name]))
            for p in pages
            if isinstance(p["series"].get(name), int | float)
        ]
        if kept:
            out[name] = {
                "t_s": [(t - t0) / 1e9 for t, _ in kept[::step]],
                "values": [v for _, v in kept[::step]],
            }
    hits, queries = out.get("prefix_cache_hits"), out.get("prefix_cache_queries")
    if "prefix_cache_hit_rate" not in out and hits and queries and len(hits["values"]) > 1:
        asked = queries["values"][-1] - queries["values"][0]
        if asked > 0:
            rate = (hits["values"][-1] - hits["values"][0]) / asked
            out["prefix_cache_hit_rate"] = {"t_s": [hits["t_s"][-1]], "values": [rate]}
    return out


def findings(
    series: dict[str, dict[str, list[float]]], side: Side, limits: dict[str, float]
) -> list[Finding]:
    """The rules of the module docstring, in order; "outside" only when no other holds."""
    out = [
        found
        for found in (
            _admission(series, limits),
            _memory(series, limits),
            _cache(series, side, limits),
        )
        if found is not None
    ]
    rise = _latency_rise(side)
    if not out and rise is not None and rise >= limits["latency_rise"]:
        text = (
            f"latency rose (P99 x{rise:.2f} from the run's first half to its second) with "
            "no sign of it in the engine: look outside it (network, gateway, the client)"
        )
        out.append({"rule": "outside", "text": text})
    return out


def _admission(
    series: dict[str, dict[str, list[float]]], limits: dict[str, float]
) -> Finding | None:
    waiting, running = series.get("waiting"), series.get("running")
    if not (waiting and running and len(waiting["values"]) == len(running["values"])):
        return None
    w, r = np.array(waiting["values"]), np.array(running["values"])
    hit = (w > limits["waiting"]) & (r < limits["running"])
    if not hit.any():
        return None
    text = (
        f"admission or prefill bound: more than {limits['waiting']:g} requests waiting "
        f"while fewer than {limits['running']:g} ran, in {hit.mean():.0%} of the "
        f"samples (waiting up to {w.max():,.0f})"
    )
    return {"rule": "admission", "text": text}


def _memory(series: dict[str, dict[str, list[float]]], limits: dict[str, float]) -> Finding | None:
    kv, pre = series.get("kv_cache_usage"), series.get("preemptions")
    kv_max = max(kv["values"]) if kv else 0.0
    preempted = pre["values"][-1] - pre["values"][0] if pre else 0.0
    if kv_max <= limits["kv_cache"] and preempted <= 0:
        return None
    text = (
        f"memory bound: KV-cache usage up to {kv_max:.0%} (limit {limits['kv_cache']:.0%}), "
        f"{preempted:,.0f} preemptions during the run"
    )
    return {"rule": "memory", "text": text}


def _cache(
    series: dict[str, dict[str, list[float]]], side: Side, limits: dict[str, float]
) -> Finding | None:
    rate = series.get("prefix_cache_hit_rate")
    inputs = side.input_tokens[side.input_tokens >= 0]
    median_in = float(np.median(inputs)) if inputs.size else 0.0
    if not rate or median_in < limits["long_input"] or rate["values"][-1] >= limits["hit_rate"]:
        return None
    text = (
        f"cache bound: prefix-cache hit rate {rate['values'][-1]:.0%} (under "
        f"{limits['hit_rate']:.0%}) with a median prompt of {median_in:,.0f} tokens"
    )
    return {"rule": "cache", "text": text}


def _latency_rise(side: Side) -> float | None:
    """The second half's P99 latency over the first half's (halves of the run by send time)."""
    latency = per_request(side.requests)["latency"]
    ok = ~np.isnan(latency) & (side.start_ns >= 0)
    if ok.sum() < 20:
        return None
    starts, values = side.start_ns[ok], latency[ok]
    middle = (int(starts.min()) + int(starts.max())) / 2
    first, second = values[starts < middle], values[starts >= middle]
    if first.size < 10 or second.size < 10:
        return None
    before = float(np.percentile(first, 99))
    return float(np.percentile(second, 99)) / before if before > 0 else None
