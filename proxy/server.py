"""Running the proxy: the archive, the sinks, the two listeners, and a clean drain.

SIGTERM or SIGINT stops accepting connections, lets requests in flight finish
for up to ``drain_timeout_s``, then flushes and closes the archive. A second
signal exits at once (records already flushed stay readable, as after kill -9).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from tailreplay.errors import UsageError
from tailreplay.prometheus import metrics_app
from tailreplay.proxy.admission import ConnectionGuard
from tailreplay.proxy.app import build_server, upstream_pool
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.connections import (
    ACCEPT_BATCH,
    accept_error_handler,
    connection_cap,
    listening_sockets,
    relisten,
)
from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.forwarding import TrustedProxies
from tailreplay.proxy.metrics import ProxyMetrics
from tailreplay.proxy.recorder_sink import RecorderClient, RecorderCounts
from tailreplay.proxy.shadow import Shadow
from tailreplay.proxy.shadow_metrics import ShadowMetrics
from tailreplay.units import host_port

__all__ = [
    "RunningProxy",
    "bind_admin",
    "bind_listen",
    "run",
    "serve_sockets",
    "server_context",
    "start",
]

log = logging.getLogger("tailreplay.proxy")


@dataclass
class RunningProxy:
    url: str
    admin_url: str | None
    recorder: RecorderClient
    metrics: ProxyMetrics


def _guard(config: ProxyConfig) -> ConnectionGuard:
    cap, warning = connection_cap(config.max_connections)
    if warning is not None:
        log.warning("%s", warning)
    trusted = TrustedProxies(config.trusted_proxies)
    return ConnectionGuard(cap, config.max_connections_per_peer, trusted)


@asynccontextmanager
async def start(config: ProxyConfig, *, reuse_port: bool = False) -> AsyncIterator[RunningProxy]:
    """Run the proxy on this loop until the block exits, then drain and close.

    >>> async with start(ProxyConfig(upstream=URL(sim_url), listen_port=0)) as proxy: ...
    """
    sockets, admin_socks = _prepare(config, reuse_port=reuse_port)
    guard = _guard(config)
    loop = asyncio.get_running_loop()
    previous_handler = loop.get_exception_handler()
    loop.set_exception_handler(accept_error_handler(guard))
    recorder = RecorderClient(config)
    try:
        await recorder.attach()
    except BaseException:
        await recorder.close()
        loop.set_exception_handler(previous_handler)
        for sock in [*sockets, *admin_socks]:
            sock.close()
        raise
    metrics = ProxyMetrics(recorder, guard)
    pool = upstream_pool(config)
    shadow = _shadow(config, recorder, metrics)
    runner = web.ServerRunner(
        build_server(config, [recorder, metrics], pool, guard, shadow),
        shutdown_timeout=config.drain_timeout_s,
    )
    admin_runner: web.AppRunner | None = None
    try:
        await runner.setup()
        await _serve(runner, config, sockets)
        host, port = runner.addresses[0][:2]
        admin_url = None
        if admin_socks:
            admin_runner = web.AppRunner(
                metrics_app(metrics.registry, recorder.problem, metrics.answers.note),
                access_log=None,
            )
            admin_url = await serve_sockets(admin_runner, admin_socks)
        scheme = "https" if config.tls_cert is not None else "http"
        yield RunningProxy(f"{scheme}://{host_port(host, port)}", admin_url, recorder, metrics)
    finally:
        # Stop listening, let requests in flight finish (up to drain_timeout_s), then
        # write out every record they produced.
        await runner.cleanup()
        if shadow is not None:  # its copies are recorded too, before the recorder closes
            await shadow.close(config.drain_timeout_s)
            c = shadow.counts  # every copy sent has ended, and been recorded
            recorder.copies, recorder.copies_failed = c.sent, c.errors
            recorder.copies_unfinished, recorder.copies_not_sent = c.unfinished, c.dropped
            recorder.copies_cut = c.cut
        await pool.close()
        if admin_runner is not None:
            await admin_runner.cleanup()
        await recorder.close()
        loop.set_exception_handler(previous_handler)


def _shadow(config: ProxyConfig, recorder: RecorderClient, metrics: ProxyMetrics) -> Shadow | None:
    """``--shadow``'s sender: each finished copy recorded and counted in its own metrics."""
    if config.shadow is None:
        return None
    shadow_metrics: ShadowMetrics | None = None

    def record(ex: Exchange) -> None:
        recorder.on_complete(ex)
        assert shadow_metrics is not None
        shadow_metrics.observe(ex)

    shadow = Shadow(config.shadow, record, config.timeout_s, config.sampling_key)
    shadow_metrics = ShadowMetrics(shadow.counts)
    metrics.registry.register(shadow_metrics)
    return shadow


def _prepare(
    config: ProxyConfig, *, reuse_port: bool
) -> tuple[list[socket.socket], list[socket.socket]]:
    """The proxy's and the admin port's sockets bound, then the capture folder made:
    all before the recorder opens its capture file, so a port in use is one line
    (exit 2) with nothing left behind, not even an empty folder."""
    sockets = bind_listen(config, reuse_port=reuse_port)
    try:
        admin = bind_admin(config)
        try:
            config.out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            for sock in admin:
                sock.close()
            where = f"--out {config.out_dir}"
            raise UsageError(f"{where}: cannot create it ({exc.strerror or exc})") from None
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets, admin


async def serve_sockets(runner: web.AppRunner, sockets: list[socket.socket]) -> str:
    """``runner`` set up and served on ``sockets`` (bound already); its base URL."""
    await runner.setup()
    for sock in sockets:
        await web.SockSite(runner, sock).start()
    host, port = runner.addresses[0][:2]
    return f"http://{host_port(host, port)}"


def bind_listen(config: ProxyConfig, *, reuse_port: bool) -> list[socket.socket]:
    """The proxy's listening sockets (``--listen``); a port in use is a ``UsageError``."""
    try:
        return listening_sockets(
            config.listen_host,
            config.listen_port,
            reuse_port=reuse_port,
            defer_s=config.idle_timeout_s,
        )
    except OSError as exc:
        where = host_port(config.listen_host, config.listen_port)
        raise UsageError(f"--listen {where}: {exc.strerror or exc}") from None


def bind_admin(config: ProxyConfig) -> list[socket.socket]:
    """The admin port's sockets (none with ``--admin-listen off``); in use: ``UsageError``."""
    if config.admin_port is None:
        return []
    try:
        return listening_sockets(config.admin_host, config.admin_port, reuse_port=False, defer_s=0)
    except OSError as exc:
        where = host_port(config.admin_host, config.admin_port)
        raise UsageError(f"--admin-listen {where}: {exc.strerror or exc}") from None


# The listener's TLS (``--tls-cert``): so the proxy can stand where an HTTPS endpoint stood.
#
# Modern settings only (Mozilla's "intermediate" profile): TLS 1.2 and 1.3, forward-
# secret AEAD ciphers, no compression, no renegotiation. HTTP/1.1 is offered by
# ALPN, which is what the OpenAI SDKs and curl speak.

_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"  # TLS 1.2; TLS 1.3's suites are all AEAD


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context for ``cert`` (PEM, with its chain) and ``key``; one line if unusable."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])
    try:
        context.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise UsageError(f"--tls-cert/--tls-key: {exc.filename}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        message = f"--tls-cert {cert} / --tls-key {key}: cannot use them ({reason})"
        raise UsageError(message) from None
    return context


async def _serve(
    runner: web.ServerRunner, config: ProxyConfig, sockets: list[socket.socket]
) -> None:
    tls = None
    if config.tls_cert is not None and config.tls_key is not None:
        tls = server_context(config.tls_cert, config.tls_key)
    for sock in sockets:
        await web.SockSite(runner, sock, backlog=ACCEPT_BATCH, ssl_context=tls).start()
    relisten(sockets)


async def run(
    config: ProxyConfig,
    ready: Callable[[RunningProxy], None] | None = None,
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> RecorderCounts:
    """Serve until one of ``signals``; a second signal exits at once. What the recorder
    did with the exchanges, once its files are closed, and how many answers were 404s."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    running: list[RunningProxy] = []

    def on_signal() -> None:
        if stop.is_set():
            log.warning("second signal: exiting without draining")
            os._exit(130)
        in_flight = running[0].metrics.in_flight if running else 0
        if in_flight:  # an idle proxy's stop is not worth a warning
            log.warning(
                "draining: %d requests in flight (given up to %.0f s to finish)",
                in_flight,
                config.drain_timeout_s,
            )
        stop.set()

    for sig in signals:
        with suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal)
    async with start(config, reuse_port=config.workers > 1) as proxy:
        # A proxy process, not a library call: tune the collector for forwarding, which
        # allocates many short-lived objects — the default young-generation pass every
        # 700 allocations ran several times a request. What start-up made (modules, the
        # app, the session) is frozen out of collection (about 5% of a request's CPU).
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)
        running.append(proxy)
        if ready is not None:
            ready(proxy)
        await stop.wait()
    counts, answered = proxy.recorder.counts(), proxy.metrics.answers
    counts.answers, counts.not_found = answered.answers, answered.not_found
    return counts
