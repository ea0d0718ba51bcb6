"""What telemetry costs a replay: dispatch lag with OTLP off, to a live collector, to a dead one.

The same archive (evenly spaced streaming requests, 2-token outputs) is replayed at
the built-in simulator three ways in one invocation: without telemetry, with
``--otlp-endpoint`` at a live OTLP/HTTP sink (a small aiohttp server that counts
spans), and at a dead port. Each way runs ``--runs`` times; the table shows the
median lag P50/P99 and the ratio of lag P99 against the run without telemetry.
Then the CPU cost of making one span (RecordSpans.emit into a no-op exporter).

Run: ``.venv/bin/python bench/telemetry.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import even_archive

from proxy import free_port, process
from tailreplay.traces.archive.record import Record

SINK = """
import sys
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse)
spans = 0
async def traces(request):
    global spans
    req = ExportTraceServiceRequest()
    req.ParseFromString(await request.read())
    spans += sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
    return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                        content_type="application/x-protobuf")
app = web.Application(client_max_size=64 << 20)
app.router.add_post("/v1/traces", traces)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def replay(url: str, archive: Path, tmp: Path, *extra: str) -> dict[str, float]:
    summary = tmp / "s.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", "--target", url, "--json", str(summary),
         "--out", str(tmp / "r.msgpack"), "--tail-stretch", "1", str(archive), *extra],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    s = json.loads(summary.read_text())
    exported = next(
        (int(w.replace(",", "")) for line in proc.stderr.splitlines()
         if line.startswith("spans:") for w in line.split()[1:2]),
        0,
    )  # fmt: skip
    return {
        "lag_p50": s["lag_ms"]["p50"],
        "lag_p99": s["lag_ms"]["p99"],
        "completed": s["completed"],
        "spans": exported,
    }


def span_cost_us(n: int = 20_000) -> float:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.trace import SpanKind

    from tailreplay.exporters.otlp import OtlpOptions, Telemetry
    from tailreplay.exporters.spans import RecordSpans

    class Nothing(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.SUCCESS

    telemetry = Telemetry.for_processor(SimpleSpanProcessor(Nothing()), OtlpOptions())
    spans = RecordSpans(telemetry, kind=SpanKind.CLIENT, server=("127.0.0.1", 8000))
    record = Record(
        start_ns=1, trace_id=b"t" * 16, span_id=b"s" * 8, method="POST",
        path="/v1/chat/completions", model="m", stream=True, status=200, input_tokens=100,
        output_tokens=50, max_tokens=50, duration_ns=10**9, ttfb_ns=10**8, lag_ns=1000,
        tail=False, orig_trace_id=b"o" * 16, orig_span_id=b"p" * 8, finish_reason="length",
    )  # fmt: skip
    t0 = time.perf_counter()
    for _ in range(n):
        spans.emit(record)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        archive = tmp / "a.msgpack"
        n = even_archive(archive, args.rate, args.seconds, traced=True, model="m", stream=True)
        sim_port, sink_port = free_port(), free_port()
        sim = [sys.executable, "-m", "tailreplay", "sim", "--listen", f"127.0.0.1:{sim_port}",
               "--profile", "fast"]  # fmt: skip
        with (
            process(sim, sim_port),
            process([sys.executable, "-c", SINK, str(sink_port)], sink_port),
        ):
            url = f"http://127.0.0.1:{sim_port}"
            ways = {
                "off": (),
                "otlp live": ("--otlp-endpoint", f"http://127.0.0.1:{sink_port}/v1/traces"),
                "otlp dead": ("--otlp-endpoint", "http://127.0.0.1:9/v1/traces",
                              "--otlp-timeout", "1s"),
            }  # fmt: skip
            results: dict[str, list[dict[str, float]]] = {w: [] for w in ways}
            for _ in range(args.runs):  # interleaved, so drift hits every way alike
                for way, extra in ways.items():
                    results[way].append(replay(url, archive, tmp, *extra))
    print(f"replay of {n:,} streaming requests at {args.rate}/s, median of {args.runs} runs")
    print(f"{'telemetry':<11} {'lag p50 ms':>10} {'lag p99 ms':>10} {'p99 ratio':>9} "
          f"{'completed':>9} {'spans':>7}")  # fmt: skip
    base = statistics.median(r["lag_p99"] for r in results["off"])
    for way, runs in results.items():
        p50 = statistics.median(r["lag_p50"] for r in runs)
        p99 = statistics.median(r["lag_p99"] for r in runs)
        done = statistics.median(r["completed"] for r in runs)
        spans = statistics.median(r["spans"] for r in runs)
        print(
            f"{way:<11} {p50:>10.3f} {p99:>10.3f} {p99 / base:>9.2f} {done:>9,.0f} {spans:>7,.0f}"
        )
    print(f"making one span: {span_cost_us():.1f} us (RecordSpans.emit, no-op exporter)")


if __name__ == "__main__":
    main()
