"""``--workers N``: N proxy processes sharing one listening port (SO_REUSEPORT).

Each worker is a whole proxy with its own archive files (the pid is in their
names; ``traces merge`` joins them) and a private admin port on 127.0.0.1. The
parent serves the configured admin port and sums the workers' metrics, so one
scrape sees the whole proxy. Signals go to every worker; the parent exits when
they have drained.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import queue
import signal
import socket
import time
from collections import defaultdict
from contextlib import suppress
from typing import Any

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from tailreplay.errors import RunFailed, TailreplayError
from tailreplay.http.client import UpstreamError, UpstreamPool, split_url
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.recorder_sink import RecorderCounts
from tailreplay.proxy.server import bind_admin, bind_listen, serve_sockets
from tailreplay.traces.text.redact_targets import redact_url

__all__ = ["merge_metrics", "run_workers"]

log = logging.getLogger("tailreplay.proxy")


def _worker(config: ProxyConfig, ready: Any) -> None:
    from tailreplay.proxy.server import RunningProxy, run

    def on_ready(p: RunningProxy) -> None:
        ready.put((p.url, p.admin_url))

    # Ctrl-C reaches the whole process group; the parent relays it as SIGTERM, and a
    # worker that saw both would take the second as "exit without draining".
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        counts = asyncio.run(run(config, on_ready, signals=(signal.SIGTERM,)))
    except TailreplayError as exc:  # the parent says it, once, and exits with its code
        ready.put(exc)
        return
    ready.put(counts)  # for the parent's closing line


def merge_metrics(texts: list[str]) -> str:
    """Prometheus text of several processes, summed series by series."""
    kinds: dict[str, str] = {}
    helps: dict[str, str] = {}
    values: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    order: dict[str, list[str]] = defaultdict(list)
    for text in texts:
        for family in text_string_to_metric_families(text):
            kinds[family.name] = family.type
            helps[family.name] = family.documentation
            for sample in family.samples:
                key = tuple(sorted(sample.labels.items()))
                series = values[sample.name]
                if sample.name not in order[family.name]:
                    order[family.name].append(sample.name)
                series[key] = series.get(key, 0.0) + sample.value
    lines = []
    for name, kind in kinds.items():
        lines.append(f"# HELP {name} {helps[name]}")
        lines.append(f"# TYPE {name} {kind}")
        for sample_name in order[name]:
            for labels, value in values[sample_name].items():
                rendered = ",".join(f'{k}="{v}"' for k, v in labels)
                lines.append(
                    f"{sample_name}{{{rendered}}} {value}" if labels else f"{sample_name} {value}"
                )
    return "\n".join(lines) + "\n"


def run_workers(config: ProxyConfig, announce: Any = print) -> None:
    """Start ``config.workers`` processes and serve the aggregated admin port until signalled."""
    admin = _check_ports(config)
    ctx = multiprocessing.get_context("spawn")
    ready: Any = ctx.Queue()
    worker_config = dataclasses.replace(config, admin_host="127.0.0.1", admin_port=0)
    procs = [
        ctx.Process(target=_worker, args=(worker_config, ready), daemon=False)
        for _ in range(config.workers)
    ]
    for p in procs:
        p.start()
    try:
        urls = _wait_ready(procs, ready)
    except BaseException:
        for sock in admin:
            sock.close()
        _stop(procs)
        raise
    upstream = redact_url(str(config.upstream))
    announce(f"tailreplay proxy: {len(procs)} workers listening on {urls[0][0]} -> {upstream}")
    announce(f"recording into {config.out_dir}/")
    asyncio.run(_serve_admin(config, admin, procs, [a for _, a in urls], announce))
    closed = _closed_counts(ready, len(procs))
    unknown = (
        f" ({len(procs) - len(closed)} workers did not say)" if len(closed) < len(procs) else ""
    )
    total = RecorderCounts.total(closed)
    announce(f"archives closed in {config.out_dir}/: {total.summary()}{unknown}")


def _closed_counts(ready: Any, workers: int) -> list[Any]:
    """The recorder counts each worker sent as it ended (the workers have exited)."""
    counts: list[Any] = []
    while len(counts) < workers:
        try:
            got = ready.get(timeout=1.0)
        except queue.Empty:
            break
        if not isinstance(got, BaseException):
            counts.append(got)
    return counts


READY_S = 60.0
"""The longest the workers may take to listen."""
ADMIN_PAGE_BYTES = 16 * 2**20
"""The most of a worker's admin page the parent reads."""


def _check_ports(config: ProxyConfig) -> list[socket.socket]:
    """Before any worker starts: the admin port bound (its sockets, served later), and the
    proxy's port tried as the workers will bind it, so a port in use is one line (exit 2)
    with no worker started."""
    for sock in bind_listen(config, reuse_port=True):
        sock.close()  # only tried: listening here would take a share of the connections
    return bind_admin(config)


def _wait_ready(procs: list[Any], ready: Any) -> list[tuple[str, str]]:
    """Every worker's (url, admin url); a worker's own error raised again here."""
    urls: list[tuple[str, str]] = []
    deadline = time.monotonic() + READY_S
    while len(urls) < len(procs):
        try:
            got = ready.get(timeout=0.2)
        except queue.Empty:
            if time.monotonic() > deadline:
                raise RunFailed(f"the workers did not listen within {READY_S:g} s") from None
            if not all(p.is_alive() for p in procs):
                raise RunFailed("a worker exited before it listened") from None
            continue
        if isinstance(got, BaseException):
            raise got
        urls.append(got)
    return urls


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()


def _admin_app(pool: UpstreamPool, procs: list[Any], admin_urls: list[str]) -> web.Application:
    """The parent's admin port: the workers' metrics summed, and their health."""

    async def page(url: str) -> str | None:
        """A worker's admin page, None when it could not be read (a worker stopping)."""
        origin, target = split_url(url)
        with suppress(UpstreamError, UnicodeDecodeError):
            _, body = await pool.fetch(origin, target, [], limit=ADMIN_PAGE_BYTES)
            return body.decode()
        return None

    async def prom(request: web.Request) -> web.Response:
        texts = [t for url in admin_urls if (t := await page(url + "/metrics")) is not None]
        return web.Response(text=merge_metrics(texts), content_type="text/plain")

    async def said(degraded_only: bool) -> list[str]:
        """What the workers' /healthz say other than "ok": their capture problems and
        warnings, or only the workers with a capture problem."""
        out = []
        for i, url in enumerate(admin_urls):
            text = await page(url + "/healthz")
            if text is None or text == "ok":
                continue
            if text.startswith("degraded") or not degraded_only:
                out.append(f"worker {i}: {text}")
        return out

    async def health(request: web.Request) -> web.Response:
        alive = sum(p.is_alive() for p in procs)
        problems = await said(degraded_only=False)
        text = f"{alive}/{len(procs)} workers" + "".join(f"; {p}" for p in problems)
        return web.Response(text=text, status=200 if alive == len(procs) else 503)

    async def capture(request: web.Request) -> web.Response:
        problems = await said(degraded_only=True)
        return web.Response(text="; ".join(problems) or "ok", status=503 if problems else 200)

    app = web.Application()
    app.router.add_get("/metrics", prom)
    app.router.add_get("/healthz", health)
    app.router.add_get("/healthz/capture", capture)
    return app


async def _serve_admin(
    config: ProxyConfig,
    admin: list[socket.socket],
    procs: list[Any],
    admin_urls: list[str],
    announce: Any,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        for p in procs:
            if p.is_alive():
                with suppress(ProcessLookupError):
                    (p.kill if signals > 1 else p.terminate)()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)

    # The workers' admin pages are read with the proxy's own HTTP client.
    pool = UpstreamPool(timeout_s=5.0, connect_timeout_s=5.0)
    try:
        runner: web.AppRunner | None = None
        if admin:
            runner = web.AppRunner(_admin_app(pool, procs, admin_urls), access_log=None)
            announce(f"tailreplay proxy admin on {await serve_sockets(runner, admin)}")
        while not stop.is_set() and all(p.is_alive() for p in procs):
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        if not stop.is_set():
            log.warning("a worker exited; stopping the others")
            on_signal()
        for p in procs:
            await loop.run_in_executor(None, p.join)
        if runner is not None:
            await runner.cleanup()
    finally:
        await pool.close()
