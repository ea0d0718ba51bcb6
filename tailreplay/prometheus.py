"""Serving a Prometheus registry over HTTP, and keeping label values bounded.

The proxy's admin port and the replayer's ``--metrics-listen`` serve their own
``CollectorRegistry`` (never the global one) from an aiohttp app on the same
event loop: a scrape is one short callback, not a second thread holding the GIL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["BoundedLabel", "metrics_app", "serve_metrics", "status_class"]


def status_class(status: int | None) -> str:
    """The ``status`` label: 2xx, 4xx, 5xx…, or "error" when no response came (status 0)."""
    return f"{status // 100}xx" if status else "error"


class BoundedLabel:
    """At most ``limit`` distinct values of a label; later newcomers become "other".

    A model name comes from the traffic, so an unbounded label would let one
    archive (or one client) create any number of time series.
    """

    def __init__(self, limit: int = 20) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        if value is None:
            return "none"
        if value in self._seen:
            return value
        if len(self._seen) < self.limit:
            self._seen.add(value)
            return value
        return "other"


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """An app serving ``/metrics`` from ``registry`` and ``/healthz``."""

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", health)
    return app


@asynccontextmanager
async def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> AsyncIterator[str]:
    """Serve ``registry`` on HOST:PORT while the block runs; yields the base URL."""
    runner = web.AppRunner(metrics_app(registry), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        bound_host, bound_port = runner.addresses[0][:2]
        yield f"http://{bound_host}:{bound_port}"
    finally:
        await runner.cleanup()
