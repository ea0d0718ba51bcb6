"""The proxy's configuration: one dataclass, built by the CLI, passed to everything."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Any

from yarl import URL

from tailreplay.declared import default_of
from tailreplay.proxy.exchange import ServerSpans
from tailreplay.proxy.settings import BODY_MODES, ProxyOptions, Route
from tailreplay.proxy.shadow import ShadowConfig
from tailreplay.sampling import new_key
from tailreplay.traces.archive.capture_header import CaptureHeader, Shadow
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.text.redact_targets import redact_url

__all__ = ["BODY_MODES", "ProxyConfig", "Route", "archive_header"]

_LISTEN = default_of(ProxyOptions, "listen")
_ADMIN = default_of(ProxyOptions, "admin_listen")


@dataclass
class ProxyConfig:
    """The proxy's run: the command line builds it from ``ProxyOptions``, whose
    declarations are its defaults too (``proxy/settings.py``)."""

    upstream: URL
    listen_host: str = _LISTEN[0]
    listen_port: int = _LISTEN[1]
    admin_host: str = _ADMIN[0]
    admin_port: int | None = _ADMIN[1]
    out_dir: Path = default_of(ProxyOptions, "out_dir")
    prefix: str = default_of(ProxyOptions, "prefix")
    rotate_bytes: int | None = default_of(ProxyOptions, "rotate_size")
    rotate_interval_s: float | None = default_of(ProxyOptions, "rotate_interval")
    compress: bool = default_of(ProxyOptions, "compress")
    bodies: str = default_of(ProxyOptions, "bodies")
    sample: float = default_of(ProxyOptions, "sample")
    redact_headers: frozenset[str] = frozenset()
    routes: tuple[Route, ...] = ()
    inject_usage: bool = default_of(ProxyOptions, "inject_usage")
    max_body: int = default_of(ProxyOptions, "max_body")
    timeout_s: float = default_of(ProxyOptions, "timeout")
    idle_timeout_s: float = default_of(ProxyOptions, "idle_timeout")
    """A client's time to send a whole request head, from connecting or its last response."""
    body_timeout_s: float = default_of(ProxyOptions, "body_timeout")
    """The longest a client may pause in the middle of a request body."""
    max_connections: int | None = None
    """Client connections at once; None: as many as the open-file limit allows."""
    max_connections_per_peer: int | None = None
    """Client connections one peer (client IP) may hold; None: a quarter of the cap, at
    least 8 (``proxy/peers.py``). Peers in ``trusted_proxies`` are not held to it."""
    tls_cert: Path | None = None
    """With ``tls_key``: clients connect with TLS (PEM certificate chain and key)."""
    tls_key: Path | None = None
    drain_timeout_s: float = default_of(ProxyOptions, "drain_timeout")
    trusted_proxies: tuple[IPv4Network | IPv6Network, ...] = ()
    """Peers whose forwarding headers are believed (``proxy/forwarding.py``): from them
    the X-Forwarded-For chain is extended; from any other peer a client's own
    forwarding headers are dropped and the proxy sets its own."""
    fingerprint_key: bytes = field(default_factory=lambda: os.urandom(32), repr=False)
    """Keys the HMACs that replace secrets and session ids. Random per process unless
    given (--fingerprint-key-env): then fingerprints are stable across restarts."""
    sampling_key: bytes = field(default_factory=new_key, repr=False)
    """Keys the hash of trace ids that ``sample`` and the shadow's share compare
    (``tailreplay/sampling.py``), so clients cannot choose their traces' fate. Random
    per run unless given (--sampling-key-file): replicas decide alike only with the
    same key. Never written to an archive."""
    workers: int = default_of(ProxyOptions, "workers")
    shed_after_s: float | None = default_of(ProxyOptions, "shed_after")
    """An exchange the recorder reaches this long after it ended is recorded shed
    (``Record.shed``): without its redacted body, prompt tokens, prefix hashes and
    statistics, the work that is most of a record's cost (``bench/recorder.py``). A
    recorder short of CPU so keeps every exchange's timing and counts, and the
    capture its arrival process, instead of dropping whole records once the pipe to
    it is full; it does the whole work again as soon as it has caught up. None:
    never shed."""
    flush_interval_s: float = 1.0
    queue_size: int = 50_000
    shadow: ShadowConfig | None = None
    """``--shadow``: a share of generating requests copied to a second target
    (``proxy/shadow.py``)."""
    spans: Callable[[], AbstractContextManager[ServerSpans]] | None = None
    """One SERVER span per request, made and exported by the recorder process, which
    enters this for its lifetime (``exporters.spans.proxy_spans`` with the OTLP
    options bound: picklable, since the recorder is a spawned process)."""

    def upstream_for(self, path: str) -> URL:
        """The upstream for ``path``: the longest matching route prefix, else the default."""
        best: Route | None = None
        for route in self.routes:
            if path.startswith(route.prefix) and (
                best is None or len(route.prefix) > len(best.prefix)
            ):
                best = route
        return best.upstream if best else self.upstream

    def allowed_origins(self) -> frozenset[tuple[str, str | None, int | None]]:
        """(scheme, host, port) of every configured upstream: the only places we forward to."""
        urls = [self.upstream, *(r.upstream for r in self.routes)]
        return frozenset((u.scheme, u.host, u.port) for u in urls)


def _shown(url: URL) -> str:
    """An upstream as archive headers keep it: no user or password, no credentials."""
    return redact_url(str(url.with_user(None)))


def archive_header(config: ProxyConfig) -> dict[str, Any]:
    """The header of every archive file the proxy writes: what was captured, and how."""
    shadow = config.shadow
    return make_header(
        "proxy",
        upstream=_shown(config.upstream),
        capture=CaptureHeader(
            shadow=Shadow(_shown(shadow.url), shadow.share) if shadow is not None else None,
            bodies=config.bodies,
            sample=config.sample,
            redact_headers=tuple(sorted(config.redact_headers)),
            timeout_s=config.timeout_s,
            shed_after_s=config.shed_after_s,
            routes={r.prefix: _shown(r.upstream) for r in config.routes},
            trusted_proxies=tuple(str(n) for n in config.trusted_proxies),
            listen=(config.listen_host, config.listen_port),
            # Spans went out live: `traces export otlp` then sends these as new spans.
            otlp_live=config.spans is not None,
        ).to_map(),
    )
