"""Prometheus metrics of the simulator, under vLLM's names where one fits.

Engine state (queue lengths, KV usage, token and preemption counts) is read at
scrape time by a collector, so the scheduler loop never touches a metric; the
per-request histograms are observed by the HTTP handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailreplay.sim.batching import Engine

__all__ = ["SimMetrics"]

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40)
_TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1)


class _EngineCollector(Collector):
    def __init__(self, engine: Engine, model: str) -> None:
        self.engine = engine
        self.model = model

    def collect(self) -> Iterator[Metric]:
        e, labels = self.engine, [self.model]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric(labels, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric(labels, value)
            return c

        yield gauge("vllm:num_requests_running", "Sequences running.", len(e.running))
        yield gauge("vllm:num_requests_waiting", "Sequences waiting.", len(e.waiting))
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 0 to 1.", e.kv_usage)
        yield counter(
            "vllm:prompt_tokens",
            "Prompt tokens of requests prefilled, cached or not (as vLLM counts).",
            e.stats.prompt_tokens,
        )
        yield counter(
            "tailreplay_sim_prefill_tokens",
            "Prompt tokens computed (less prefix-cache hits, plus recomputation).",
            e.stats.prefill_tokens,
        )
        yield counter(
            "vllm:generation_tokens", "Generation tokens produced.", e.stats.generation_tokens
        )
        yield counter("vllm:num_preemptions", "Preemptions.", e.stats.preemptions)
        yield from _prefix_cache_metrics(e, counter, gauge)
        yield counter("tailreplay_sim_steps", "Engine steps run.", e.stats.steps)
        yield counter(
            "tailreplay_sim_step_modelled_seconds",
            "Sum of the modelled cost of every step.",
            e.stats.modelled_s,
        )
        yield counter(
            "tailreplay_sim_step_achieved_seconds",
            "Sum of the wall time every step took (>= modelled).",
            e.stats.achieved_s,
        )
        yield counter(
            "tailreplay_sim_late_steps",
            "Steps that ended later than modelled (the simulator was the bottleneck).",
            e.stats.late_steps,
        )


def _prefix_cache_metrics(
    e: Engine,
    counter: Callable[[str, str, float], CounterMetricFamily],
    gauge: Callable[[str, str, float], GaugeMetricFamily],
) -> Iterator[Metric]:
    # vLLM 0.10's names; it still exposes the vllm:gpu_ ones (0.8 and 0.9 had only
    # those), so dashboards made for either find theirs.
    queries, hits = e.stats.prefix_queries, e.stats.prefix_hits
    yield counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        queries,
    )
    yield counter(
        "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", hits
    )
    yield counter(
        "vllm:gpu_prefix_cache_queries",
        "GPU prefix cache queries, in tokens. DEPRECATED: use vllm:prefix_cache_queries.",
        queries,
    )
    yield counter(
        "vllm:gpu_prefix_cache_hits",
        "GPU prefix cache hits, in tokens. DEPRECATED: use vllm:prefix_cache_hits.",
        hits,
    )
    yield gauge(
        "tailreplay_sim_prefix_cache_free_tokens",
        "Tokens of cached prompt blocks no running request uses (evictable).",
        e.cache.free_tokens,
    )
    yield counter(
        "tailreplay_sim_prefix_cache_evictions",
        "Cached prompt blocks evicted to make room.",
        e.cache.evictions,
    )


class SimMetrics:
    def __init__(self, engine: Engine, model: str) -> None:
        self.model = model
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_EngineCollector(engine, model))
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total and friends
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Request latency, arrival to last token.",
            ["model_name"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(model)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token.",
            ["model_name"],
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        ).labels(model)
        self.tpot = Histogram(
            "vllm:time_per_output_token_seconds",
            "Time per output token after the first.",
            ["model_name"],
            buckets=_TPOT_BUCKETS,
            registry=self.registry,
        ).labels(model)
        self.success = Counter(
            "vllm:request_success",
            "Finished requests by finish reason.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "tailreplay_sim_rejected",
            "Requests answered with an error, by reason.",
            ["reason"],
            registry=self.registry,
        )
        for reason in ("bad_request", "never_fits", "queue_full", "fault_error", "fault_reset"):
            self.rejected.labels(reason)
        self.aborted = Counter(
            "tailreplay_sim_client_aborts",
            "Requests whose client went away before the end.",
            registry=self.registry,
        )
