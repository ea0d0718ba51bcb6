"""``--scrape URL[@1s]``: the target's own metrics, read on the replay's clock.

Each URL is read every interval for the whole run, from just before the first
request to just after the last answer; every page becomes one sample: the wall
time it was asked for (the clock the result records use), how long it took to
answer, and the series ``tailreplay.engine_metrics.read_page`` keeps. A page
that fails (refused, not Prometheus text, not answered within its interval or
1 s, whichever is longer) is counted and named once on stderr; the replay goes
on.

The samples go beside the results, in ``RESULTS.scrape.msgpack`` (0600): a header
map, then one map per sample (docs/archive-format.md). Readers of result archives
never open it; ``report`` reads it when it is there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import msgpack

from tailreplay.engine_metrics import read_page
from tailreplay.errors import UsageError
from tailreplay.http.client import UpstreamError, UpstreamPool, split_url
from tailreplay.private import write_whole
from tailreplay.traces.text.redact_targets import redact_url
from tailreplay.units import parse_duration, parse_http_url
from tailreplay.version import __version__

__all__ = ["SCRAPE_FORMAT", "ScrapeTarget", "parse_scrape", "resolve", "scraping"]

SCRAPE_FORMAT = "tailreplay-scrape"
MAX_SAMPLES = 1_000_000
"""Pages kept per run (a day at 1 s from ten targets); later ones are counted, not kept."""
MAX_PAGE_BYTES = 16 * 2**20
"""A larger page is a failure: a metrics page of a few thousand series is ~1 MB."""
PAGE_TIMEOUT_S = 1.0
"""The least time a page gets to answer, whatever the interval."""


@dataclass(frozen=True)
class ScrapeTarget:
    url: str
    interval_s: float


TARGET = "target"
"""``--scrape target``: the replay target's own ``/metrics`` (the built-in simulator's too)."""


def parse_scrape(text: str) -> ScrapeTarget:
    """``http://host:port/metrics``, ``target`` (the replay target's ``/metrics``), either
    with ``@2s`` (default every second, at least 100 ms)."""
    url, at, every = text.rpartition("@") if "@" in text.rsplit("/", 1)[-1] else (text, "", "")
    if url != TARGET:
        parse_http_url(url, "--scrape")
    try:
        interval = parse_duration(every) if at else 1.0
    except UsageError as exc:
        raise UsageError(f"--scrape {text}: {exc}") from None
    if interval < 0.1:
        raise UsageError(f"--scrape {text}: the interval must be at least 100ms")
    return ScrapeTarget(url, interval)


def resolve(targets: list[ScrapeTarget], target_url: str) -> list[ScrapeTarget]:
    """``target`` made the replay target's metrics page."""
    page = target_url.rstrip("/") + "/metrics"
    return [ScrapeTarget(page, t.interval_s) if t.url == TARGET else t for t in targets]


@contextlib.asynccontextmanager
async def scraping(
    targets: list[ScrapeTarget], out: Path, say: Callable[[str], None]
) -> AsyncIterator[None]:
    """Read ``targets`` while the body runs; write their samples to ``out`` after."""
    samples: list[dict[str, Any]] = []
    failures: dict[str, int] = {}
    # One pool per page: each has its own timeout, and a slow page holds no other's
    # connection. The replay's own HTTP client, not a second one.
    pools = [_pool(t) for t in targets]
    tasks = [
        asyncio.create_task(_poll(pool, i, t, samples, failures, say))
        for i, (pool, t) in enumerate(zip(pools, targets, strict=True))
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for pool in pools:
            await pool.close()
        header = {
            "format": SCRAPE_FORMAT,
            "version": 1,
            "targets": [{"url": redact_url(t.url), "interval_s": t.interval_s} for t in targets],
            "failures": failures,
        }
        data = b"".join(msgpack.packb(m) for m in (header, *samples))
        try:
            write_whole(out, data)
        except OSError as exc:
            say(f"warning: {out}: the scraped metrics were not written ({exc.strerror or exc})")
        else:
            say(f"target metrics: {len(samples):,} pages in {out}")


def _pool(target: ScrapeTarget) -> UpstreamPool:
    # A page may take longer than the interval on a loaded engine; it still says how the
    # engine stood while it was asked, so it gets at least PAGE_TIMEOUT_S before it counts
    # as a failure.
    timeout = max(target.interval_s, PAGE_TIMEOUT_S)
    return UpstreamPool(timeout_s=timeout, connect_timeout_s=timeout, max_connections=1, max_idle=1)


async def _poll(
    pool: UpstreamPool,
    index: int,
    target: ScrapeTarget,
    samples: list[dict[str, Any]],
    failures: dict[str, int],
    say: Callable[[str], None],
) -> None:
    loop = asyncio.get_running_loop()
    origin, path = split_url(target.url)
    headers = [*_ACCEPT, *_basic_auth(target.url)]
    shown = redact_url(target.url)  # what reaches stderr and the file: no credentials
    next_at = loop.time()
    while True:
        t_ns = time.time_ns()
        try:
            status, body = await pool.fetch(origin, path, headers, limit=MAX_PAGE_BYTES)
            if status != 200:
                raise ValueError(f"HTTP {status}")
            series = read_page(body.decode())
        except (UpstreamError, ValueError, UnicodeDecodeError) as exc:
            if shown not in failures:
                say(f"warning: --scrape {shown}: {_why(exc)}")
            failures[shown] = failures.get(shown, 0) + 1
        else:
            # Its round trip is kept so a reader knows how exact its moment is.
            if len(samples) < MAX_SAMPLES:
                samples.append(
                    {
                        "t_ns": t_ns,
                        "took_ns": time.time_ns() - t_ns,
                        "target": index,
                        "series": series,
                    }
                )
        # Ticks a slow page overran are skipped, not sent back to back to catch up.
        now = loop.time()
        next_at += target.interval_s * max(1, math.ceil((now - next_at) / target.interval_s))
        await asyncio.sleep(max(0.0, next_at - now))


_ACCEPT = [("Accept", "text/plain;version=0.0.4"), ("User-Agent", f"tailreplay/{__version__}")]


def _basic_auth(url: str) -> list[tuple[str, str]]:
    """``http://user:password@host/metrics``: the credentials as Basic auth, as
    Prometheus' own ``basic_auth`` sends them."""
    parts = urlsplit(url)
    if parts.username is None:
        return []
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return [("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())]


def _why(exc: Exception) -> str:
    """A failed page's reason in the scrape's words: the shared client calls the far
    end "the upstream", as the proxy does."""
    if isinstance(exc, UpstreamError):
        return exc.message.replace("the upstream", "the page")
    return str(exc) or type(exc).__name__
