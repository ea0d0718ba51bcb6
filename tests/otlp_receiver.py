"""A small OTLP/HTTP trace receiver for tests: decodes with opentelemetry-proto's types.

It is a real endpoint (protobuf over HTTP, optionally TLS or mTLS) so tests see
exactly the bytes an exporter sends — ids, kinds, timestamps, attributes, links
— without a collector. ``delay_s`` makes it slow, ``status`` makes it fail.
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.proxy_helpers import in_thread

__all__ = ["ReceivedSpan", "Receiver", "any_value", "receiver", "receiver_in_thread"]


def any_value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: list[tuple[str, str]]
    events: list[tuple[str, int]]
    status_code: int


@dataclass
class Receiver:
    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    """Every export request's body as received (decompressed): to grep for bytes."""
    requests: int = 0
    delay_s: float = 0.0
    status: int = 200


def _decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for rs in request.resource_spans:
        resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    ReceivedSpan(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        kind=s.kind,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes={kv.key: any_value(kv.value) for kv in s.attributes},
                        resource=resource,
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                        events=[(e.name, e.time_unix_nano) for e in s.events],
                        status_code=s.status.code,
                    )
                )
    return out


@asynccontextmanager
async def receiver(ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[Receiver]:
    state = Receiver()

    async def traces(request: web.Request) -> web.Response:
        state.requests += 1
        if state.delay_s:
            await asyncio.sleep(state.delay_s)
        if state.status != 200:
            return web.Response(status=state.status)
        try:
            body = await request.read()
        except ConnectionResetError:  # the exporter gave up waiting (a slow-receiver test)
            return web.Response(status=499)
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        state.raw.append(body)
        state.spans.extend(_decode(body))
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
    host, port = runner.addresses[0][:2]
    state.url = f"{'https' if ssl_context else 'http'}://{host}:{port}/v1/traces"
    try:
        yield state
    finally:
        await runner.cleanup()


def receiver_in_thread(
    ssl_context: ssl.SSLContext | None = None,
) -> AbstractContextManager[Receiver]:
    """``receiver`` on its own loop in a thread, for tests that run the CLI (CliRunner)."""
    return in_thread(receiver(ssl_context))
