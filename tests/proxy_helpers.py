"""Running the proxy in tests: in-process against a given upstream, records read after."""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from yarl import URL

from tailreplay.exporters.spans import proxy_spans
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.server import RunningProxy, start
from tailreplay.traces.reader import ArchiveReader
from tailreplay.traces.record import Record

T = TypeVar("T")


@asynccontextmanager
async def proxy_to(upstream: str, out: Path, **overrides: Any) -> AsyncIterator[RunningProxy]:
    config = ProxyConfig(
        upstream=URL(upstream), listen_port=0, admin_port=0, out_dir=out, flush_interval_s=0.1
    )
    options = overrides.pop("otlp", None)
    if options is not None:  # as `tailreplay proxy --otlp-endpoint ...` does
        config.spans = functools.partial(proxy_spans, options, (config.listen_host, 0))
    for k, v in overrides.items():
        setattr(config, k, v)
    async with start(config) as proxy:
        yield proxy


def records(out: Path) -> list[Record]:
    files = sorted(out.glob("*.msgpack*"))
    return list(ArchiveReader(files)) if files else []


@asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@contextmanager
def in_thread(manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
    """Enter an async context manager on its own loop in a thread (for tests that call
    asyncio.run themselves, or run the CLI through CliRunner)."""
    loop = asyncio.new_event_loop()
    ready: queue.Queue[T] = queue.Queue()
    stop = asyncio.Event()

    async def main() -> None:
        async with manager as value:
            ready.put(value)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        yield ready.get(timeout=10)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)


def serve_in_thread(app: web.Application) -> AbstractContextManager[str]:
    """Serve ``app`` on its own loop in a thread."""
    return in_thread(serve_app(app))
