"""Inference engines' own Prometheus metrics, read into common names.

``replay --scrape URL`` reads a target's metrics page during the run; this module
turns one page of Prometheus text into the series kept: every sample of a known
family under its common name (summed over label sets, or averaged for a ratio),
plus up to ``MAX_RAW`` other series under their own names, so nothing the target
exposes about itself is lost to a mapping that does not know it.

Common names (what the report's findings read):

=====================  ==========  ==================================================
name                   kind        families
=====================  ==========  ==================================================
waiting                gauge, sum  vllm:num_requests_waiting, sglang:num_queue_reqs,
                                   tgi_queue_size, llamacpp:requests_deferred
running                gauge, sum  vllm:num_requests_running, sglang:num_running_reqs,
                                   tgi_batch_current_size, llamacpp:requests_processing
kv_cache_usage         ratio 0..1  vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc,
                                   sglang:token_usage, llamacpp:kv_cache_usage_ratio
prefix_cache_hits      counter     vllm:prefix_cache_hits, vllm:gpu_prefix_cache_hits,
                                   llamacpp:prompt_tokens_cached
prefix_cache_queries   counter     vllm:prefix_cache_queries, vllm:gpu_prefix_cache_queries
prefix_cache_hit_rate  ratio 0..1  sglang:cache_hit_rate
preemptions            counter     vllm:num_preemptions
gpu_memory_used_mib    gauge, sum  DCGM_FI_DEV_FB_USED
gpu_utilization        ratio 0..1  DCGM_FI_DEV_GPU_UTIL (percent / 100)
=====================  ==========  ==================================================

llama.cpp's server counts the prompt tokens it computed (``llamacpp:prompt_tokens``,
cached ones excluded) apart from those it reused (``llamacpp:prompt_tokens_cached``):
its hits are the second; its queries would be the sum of both, which no one family
holds, so none is read (the first stays a raw series). The server ``make e2e-llama``
builds has no KV cache gauge; ``llamacpp:kv_cache_usage_ratio`` is read where a
server exposes it.

The built-in simulator exposes vLLM's names. Where an engine exposes two names for
one figure (vLLM's deprecated ``gpu_`` ones beside the new), the first listed wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["COMMON", "MAX_RAW", "read_page", "scrape_path"]

MAX_RAW = 500
"""Other series kept from one page (a DCGM exporter or a gateway can expose thousands)."""


class Common(NamedTuple):
    families: tuple[str, ...]
    how: str
    """``sum`` over label sets, ``mean`` (ratios), or ``mean_pct`` (a percent, as 0..1)."""


COMMON: dict[str, Common] = {
    "waiting": Common(
        (
            "vllm:num_requests_waiting",
            "sglang:num_queue_reqs",
            "tgi_queue_size",
            "llamacpp:requests_deferred",
        ),
        "sum",
    ),
    "running": Common(
        (
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
            "tgi_batch_current_size",
            "llamacpp:requests_processing",
        ),
        "sum",
    ),
    "kv_cache_usage": Common(
        (
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio",
        ),
        "mean",
    ),
    "prefix_cache_hits": Common(
        ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits", "llamacpp:prompt_tokens_cached"),
        "sum",
    ),
    "prefix_cache_queries": Common(
        ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"), "sum"
    ),
    "prefix_cache_hit_rate": Common(("sglang:cache_hit_rate",), "mean"),
    "preemptions": Common(("vllm:num_preemptions",), "sum"),
    "gpu_memory_used_mib": Common(("DCGM_FI_DEV_FB_USED",), "sum"),
    "gpu_utilization": Common(("DCGM_FI_DEV_GPU_UTIL",), "mean_pct"),
}
_KNOWN = {family for c in COMMON.values() for family in c.families}


def scrape_path(results: Path) -> Path:
    """Where the metrics pages read during a replay go, beside its result archive."""
    return results.with_name(results.name.removesuffix(".msgpack") + ".scrape.msgpack")


def read_page(text: str) -> dict[str, float]:
    """The series kept from one page: common names, then raw ``name{labels}`` ones.

    A page that is not Prometheus text raises ``ValueError``.
    """
    values: dict[str, list[float]] = {}
    raw: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # A counter's family is named without _total; its samples keep it.
            name = sample.name.removesuffix("_total")
            if name in _KNOWN or family.name in _KNOWN:
                values.setdefault(name if name in _KNOWN else family.name, []).append(sample.value)
            elif len(raw) < MAX_RAW and not sample.name.endswith(("_bucket", "_created")):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                raw[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    out: dict[str, float] = {}
    for common, spec in COMMON.items():
        found = next((values[f] for f in spec.families if f in values), None)
        if not found:
            continue
        if spec.how == "sum":
            out[common] = float(sum(found))
        else:
            mean = sum(found) / len(found)
            out[common] = mean / 100 if spec.how == "mean_pct" else mean
    return out | raw
