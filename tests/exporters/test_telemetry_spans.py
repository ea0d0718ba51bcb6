"""Spans from the replayer and the proxy: names, attributes, links and parentage.

The replayer's spans are checked in memory (InMemorySpanExporter) against what
the target actually received; the proxy's come from its recorder process, so
they are checked at a real OTLP/HTTP endpoint (tests/otlp_receiver.py).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tailreplay.exporters.otlp import OtlpOptions, Telemetry
from tailreplay.exporters.spans import RecordSpans
from tailreplay.replayer.config import ReplayConfig, SpanFactory
from tailreplay.replayer.run import run
from tailreplay.replayer.schedule import ScheduleConfig
from tailreplay.replayer.speed import parse_speed
from tailreplay.sampling import ARCHIVE_KEY, TraceSampler
from tailreplay.sim.profiles import PROFILES
from tailreplay.sim.server import SimConfig, build_app
from tailreplay.tracecontext import parse_traceparent
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tests.fixed_upstream import fixed_app
from tests.helpers import chat_archive
from tests.otlp_receiver import receiver
from tests.proxy_helpers import proxy_to, records, serve_app

T0 = 1_700_000_000 * 10**9
KEY = b"the proxy's sampling key, 32 bytes"

TRACEPARENTS = web.AppKey("traceparents", dict)


def _sim_recording_traceparents() -> web.Application:
    """The real simulator, with a middleware noting each request's traceparent and body."""

    @web.middleware
    async def note(request: web.Request, handler):  # type: ignore[no-untyped-def]
        body = await request.read()
        request.app[TRACEPARENTS][request.headers["traceparent"]] = body
        return await handler(request)

    app = build_app(SimConfig(profile=PROFILES["fast"], seed=1))
    app.middlewares.append(note)
    app[TRACEPARENTS] = {}
    return app


def _in_memory(telemetry: Telemetry) -> SpanFactory:
    """The replayer's spans made in this process, into ``telemetry``'s exporter."""

    @asynccontextmanager
    async def spans(server: tuple[str, int], say: object) -> AsyncIterator[RecordSpans]:
        yield RecordSpans(telemetry, kind=SpanKind.CLIENT, server=server)

    return spans


async def _replay_in_memory(
    tmp_path: Path, n: int, options: OtlpOptions
) -> tuple[list, dict[str, bytes], list[Record], str]:
    chat_archive(tmp_path / "a.msgpack", n, gap_ms=20, seed=3)
    memory = InMemorySpanExporter()
    telemetry = Telemetry.for_processor(SimpleSpanProcessor(memory), options)
    app = _sim_recording_traceparents()
    async with serve_app(app) as url:
        config = ReplayConfig(
            schedule=ScheduleConfig(paths=[tmp_path / "a.msgpack"], speed=parse_speed("4x")),
            target=url,
            out=tmp_path / "r.msgpack",
            spans=_in_memory(telemetry),
            preflight=False,  # its probe would be one more request (and trace) at the target
        )
        await run(config, lambda line: None)
    results = list(ArchiveReader([tmp_path / "r.msgpack"]))
    return list(memory.get_finished_spans()), app[TRACEPARENTS], results, url


async def test_replayed_span_is_the_context_the_target_received(tmp_path: Path) -> None:
    options = OtlpOptions(resource=(("deployment.environment", "staging"),))
    spans, received, results, url = await _replay_in_memory(tmp_path, 30, options)
    recorded = {
        m["trace_id"]: m for m in chat_archive(tmp_path / "again.msgpack", 30, gap_ms=20, seed=3)
    }
    assert len(spans) == 30 == len(received)
    port = int(url.rsplit(":", 1)[1])
    by_span = {r.span_id: r for r in results}
    for span in spans:
        ctx = span.get_span_context()
        # The span's own context is exactly the traceparent the target got.
        assert f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01" in received
        assert span.parent is None
        assert span.name == "replay chat llama-3-8b"  # never mistaken for the original
        assert span.kind is SpanKind.CLIENT
        result = by_span[ctx.span_id.to_bytes(8, "big")]
        original = recorded[result.orig_trace_id]
        # Linked to the recorded original (and, by default, a new span in its trace).
        assert [(lk.context.trace_id, lk.context.span_id) for lk in span.links] == [
            (
                int.from_bytes(original["trace_id"], "big"),
                int.from_bytes(original["span_id"], "big"),
            )
        ]
        assert ctx.trace_id == int.from_bytes(original["trace_id"], "big")
        a = span.attributes
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "llama-3-8b"
        # The budget: the recorded output, stretched for the tail; forced, so generated.
        stretch = 1.8 if result.tail else 1.0
        assert a["gen_ai.request.max_tokens"] == round(original["output_tokens"] * stretch)
        assert a["gen_ai.usage.input_tokens"] == result.input_tokens
        assert a["gen_ai.usage.output_tokens"] == result.output_tokens == result.max_tokens
        assert a["gen_ai.response.finish_reasons"] == ("length",)
        assert (a["server.address"], a["server.port"]) == ("127.0.0.1", port)
        assert a["http.request.method"] == "POST"
        assert a["http.response.status_code"] == 200
        assert "error.type" not in a
        assert a["tailreplay.replay.original_trace_id"] == original["trace_id"].hex()
        assert a["tailreplay.replay.lag_ms"] == result.lag_ns / 1e6
        assert a["tailreplay.replay.tail"] is result.tail
        assert span.start_time == result.start_ns
        assert span.end_time == result.start_ns + result.duration_ns
        assert span.resource.attributes["deployment.environment"] == "staging"
        assert span.resource.attributes["service.name"] == "tailreplay"
        events = [(e.name, e.timestamp) for e in span.events]
        assert events == [("first_token", result.start_ns + result.ttfb_ns)]
        # No content unless asked for.
        assert not any(k.startswith("gen_ai.input") for k in a)


async def test_capture_content_puts_the_prompt_in_the_span(tmp_path: Path) -> None:
    spans, received, _, _ = await _replay_in_memory(tmp_path, 4, OtlpOptions(capture_content=True))
    for span in spans:
        ctx = span.get_span_context()
        sent = json.loads(received[f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"])
        assert json.loads(span.attributes["gen_ai.input.messages"]) == sent["messages"]


async def test_errors_set_error_type_and_status(tmp_path: Path) -> None:
    chat_archive(tmp_path / "a.msgpack", 3, gap_ms=20, seed=3)
    memory = InMemorySpanExporter()
    telemetry = Telemetry.for_processor(SimpleSpanProcessor(memory), OtlpOptions())

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "overloaded"}}, status=503)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", refuse)
    async with serve_app(app) as url:
        config = ReplayConfig(
            schedule=ScheduleConfig(paths=[tmp_path / "a.msgpack"], speed=parse_speed("4x")),
            target=url,
            out=tmp_path / "r.msgpack",
            spans=_in_memory(telemetry),
            preflight=False,  # its probe would be one more request (and trace) at the target
        )
        await run(config, lambda line: None)
    spans = memory.get_finished_spans()
    assert len(spans) == 3
    for span in spans:
        assert span.attributes["error.type"] == "503"
        assert span.attributes["http.response.status_code"] == 503
        assert span.status.status_code is StatusCode.ERROR


def test_trace_sample_keeps_the_share_by_id_and_every_error_and_tail() -> None:
    memory = InMemorySpanExporter()
    telemetry = Telemetry.for_processor(SimpleSpanProcessor(memory), OtlpOptions(trace_sample=0.1))
    spans = RecordSpans(telemetry, kind=SpanKind.CLIENT)
    rng = random.Random(9)
    records = [
        Record(
            start_ns=T0 + i,
            trace_id=rng.randbytes(16),
            span_id=rng.randbytes(8),
            status=500 if i % 50 == 0 else 200,
            tail=i % 37 == 0,
            duration_ns=1000,
        )
        for i in range(5000)
    ]
    for r in records:
        spans.emit(r)
    by_id = TraceSampler(0.1, ARCHIVE_KEY)  # the replayer's key
    expected = {r.trace_id for r in records if r.status == 500 or r.tail or by_id.keep(r.trace_id)}
    got = {s.get_span_context().trace_id.to_bytes(16, "big") for s in memory.get_finished_spans()}
    assert got == expected
    assert 0.08 < sum(by_id.keep(r.trace_id) for r in records) / len(records) < 0.12
    assert spans.sampled_out == len(records) - len(expected)


async def test_proxy_span_is_parented_on_the_incoming_traceparent(tmp_path: Path) -> None:
    upstream_seen: list[str] = []

    @web.middleware
    async def note(request: web.Request, handler):  # type: ignore[no-untyped-def]
        upstream_seen.append(request.headers["traceparent"])
        return await handler(request)

    upstream = fixed_app()
    upstream.middlewares.append(note)
    incoming = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with receiver() as otlp, serve_app(upstream) as up_url:
        options = OtlpOptions(endpoint=otlp.url, resource=(("k8s.cluster.name", "prod-1"),))
        async with (
            proxy_to(up_url, tmp_path, otlp=options, sampling_key=KEY) as proxy,
            aiohttp.ClientSession() as session,
        ):
            for stream in (False, True):
                body = {
                    "model": "fixed",
                    "stream": stream,
                    "messages": [{"role": "user", "content": "hi"}],
                }
                async with session.post(
                    proxy.url + "/v1/chat/completions", json=body, headers={"traceparent": incoming}
                ) as resp:
                    assert resp.status == 200
                    await resp.read()
        # The recorder exports on close (the proxy's shutdown flushes it).
        for _ in range(50):
            if len(otlp.spans) >= 2:
                break
            await asyncio.sleep(0.1)
    assert len(otlp.spans) == 2
    for span, forwarded in zip(
        sorted(otlp.spans, key=lambda s: s.start_ns), upstream_seen, strict=True
    ):
        ctx = parse_traceparent(forwarded)
        assert ctx is not None
        assert span.kind == 2  # SPAN_KIND_SERVER
        assert span.name == "chat fixed"
        assert span.trace_id == "0af7651916cd43dd8448eb211c80319c"
        assert span.parent_span_id == "b7ad6b7169203331"
        # The upstream's parent is the proxy's span: its spans nest under ours.
        assert span.span_id == ctx.span_id.hex()
        assert span.attributes["gen_ai.usage.output_tokens"] == 5
        assert span.attributes["http.response.status_code"] == 200
        assert span.attributes["tailreplay.ttft_ms"] > 0
        assert span.resource["service.name"] == "tailreplay-proxy"
        assert span.resource["k8s.cluster.name"] == "prod-1"
    streamed = max(otlp.spans, key=lambda s: s.start_ns)
    assert streamed.attributes["tailreplay.stream"] is True
    assert streamed.attributes["tailreplay.itl.max_ms"] >= 15  # the upstream's 20 ms gaps


async def test_proxy_trace_sample_and_content_capture(tmp_path: Path) -> None:
    rng = random.Random(21)
    incoming = [f"00-{rng.randbytes(16).hex()}-{rng.randbytes(8).hex()}-01" for _ in range(40)]
    async with receiver() as otlp, serve_app(fixed_app()) as up_url:
        options = OtlpOptions(endpoint=otlp.url, trace_sample=0.5, capture_content=True)
        async with (
            proxy_to(up_url, tmp_path, otlp=options, sampling_key=KEY) as proxy,
            aiohttp.ClientSession() as session,
        ):
            for tp in incoming:
                body = {"model": "fixed", "messages": [{"role": "user", "content": "hi"}]}
                async with session.post(
                    proxy.url + "/v1/chat/completions", json=body, headers={"traceparent": tp}
                ) as resp:
                    assert resp.status == 200
        sampler = TraceSampler(0.5, KEY)  # the proxy's: spans keep the traces records would
        expected = {tp[3:35] for tp in incoming if sampler.keep(bytes.fromhex(tp[3:35]))}
        for _ in range(50):
            if len(otlp.spans) >= len(expected):
                break
            await asyncio.sleep(0.1)
    assert 10 < len(expected) < 30
    assert {s.trace_id for s in otlp.spans} == expected  # every record is still written
    written = records(tmp_path)
    assert len(written) == 40
    # A recorder behind by more than its limit sheds the prompt's work (a busy machine):
    # those records say so, and their spans carry no content; every other span does.
    shed = {r.trace_id.hex() for r in written if r.shed and r.trace_id} & expected
    assert len(shed) < len(expected), "every span's record was shed: no content to check"
    for span in otlp.spans:
        if span.trace_id in shed:
            assert "gen_ai.input.messages" not in span.attributes
            continue
        assert json.loads(span.attributes["gen_ai.input.messages"]) == [
            {"role": "user", "content": "hi"}
        ]
        assert json.loads(span.attributes["gen_ai.output.messages"]) == [
            {"role": "assistant", "content": "Hello there, friend."}
        ]


def test_a_shadow_copy_is_a_client_span_under_and_linked_to_production() -> None:
    memory = InMemorySpanExporter()
    telemetry = Telemetry.for_processor(SimpleSpanProcessor(memory), OtlpOptions())
    spans = RecordSpans(telemetry, kind=SpanKind.SERVER)
    trace, production, copy = b"t" * 16, b"p" * 8, b"c" * 8
    spans.emit(Record(start_ns=T0, trace_id=trace, span_id=production, status=200))
    shadow = Record(
        start_ns=T0 + 5,
        trace_id=trace,
        span_id=copy,
        parent_span_id=production,
        shadow_of=production,
        status=200,
        duration_ns=10,
    )
    spans.emit(shadow)
    first, second = memory.get_finished_spans()
    assert first.kind is SpanKind.SERVER and second.kind is SpanKind.CLIENT
    assert second.parent is not None and second.parent.span_id == int.from_bytes(production, "big")
    (link,) = second.links
    assert link.context.span_id == int.from_bytes(production, "big")
    assert second.attributes["tailreplay.shadow_of"] == production.hex()
