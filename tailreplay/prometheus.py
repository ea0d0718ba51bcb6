"""Serving a Prometheus registry over HTTP, and keeping label values bounded.

The proxy's admin port and the replayer's ``--metrics-listen`` serve their own
``CollectorRegistry`` (never the global one) from an aiohttp app on the same
event loop: a scrape is one short callback, not a second thread holding the GIL.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from tailreplay.errors import UsageError
from tailreplay.units import host_port

__all__ = [
    "LATENCY_BUCKETS",
    "STATUS_CLASSES",
    "BoundedLabel",
    "check_listen",
    "metrics_app",
    "serve_metrics",
    "status_class",
]

if TYPE_CHECKING:
    from aiohttp import web

LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.45,
    0.65,
    0.95,
    1.4,
    2,
    3,
    4.5,
    6.5,
    9.5,
    14,
    20,
    30,
    45,
    65,
    95,
    140,
    200,
    300,
)
"""Seconds, for every latency and TTFT histogram: no step wider than 1.5x from 100 ms to
300 s, so a P99 read off them is within a few percent (wider steps put a true 15 s
P99 near 30 s)."""

STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx", "error")
"""Every value of the ``status`` label (``status_class``)."""


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


def metrics_app(
    registry: CollectorRegistry,
    degraded: Callable[[], str | None] = lambda: None,
    warning: Callable[[], str | None] = lambda: None,
) -> web.Application:
    """An app serving ``/metrics`` from ``registry``, ``/healthz`` and ``/healthz/capture``.

    ``degraded`` says why capture is stopped, or None; ``warning`` what looks wrong
    with the traffic itself (most answers 404s), or None. ``/healthz`` answers 200
    while the process serves traffic, with "ok" or "degraded: <why>", followed by
    "; warning: <what>" when there is one (a readiness probe must not take a serving
    proxy out of rotation); ``/healthz/capture`` answers 503 while degraded, for
    monitors that alert on a status code.
    """
    from aiohttp import web  # here: a replay without --metrics-listen never loads aiohttp

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def health(request: web.Request) -> web.Response:
        why, note = degraded(), warning()
        text = "ok" if why is None else f"degraded: {why}"
        return web.Response(text=text if note is None else f"{text}; warning: {note}")

    async def capture(request: web.Request) -> web.Response:
        why = degraded()
        if why is None:
            return web.Response(text="ok")
        return web.Response(text=f"degraded: {why}", status=503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", health)
    app.router.add_get("/healthz/capture", capture)
    return app


def check_listen(host: str, port: int, flag: str) -> None:
    """A ``UsageError`` (exit 2) now when HOST:PORT cannot be listened on (in use, or not
    an address of this machine): a run checks before it sends anything."""
    try:
        socket.create_server((host, port), family=_family(host)).close()
    except OSError as exc:
        raise UsageError(f"{flag} {host_port(host, port)}: {exc.strerror or exc}") from None


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


@asynccontextmanager
async def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> AsyncIterator[str]:
    """Serve ``registry`` on HOST:PORT while the block runs; yields the base URL."""
    from aiohttp import web

    runner = web.AppRunner(metrics_app(registry), access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:  # taken since check_listen: still one line
            raise UsageError(
                f"--metrics-listen {host_port(host, port)}: {exc.strerror or exc}"
            ) from None
        bound_host, bound_port = runner.addresses[0][:2]
        yield f"http://{host_port(bound_host, bound_port)}"
    finally:
        await runner.cleanup()
