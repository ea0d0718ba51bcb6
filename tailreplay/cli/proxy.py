"""``tailreplay proxy``: the capturing reverse proxy."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import sys
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from yarl import URL

from tailreplay.cli.options import (
    DURATION,
    HOST_PORT,
    HTTP_URL,
    SIZE,
    FiniteRange,
    Parsed,
    otlp_options,
)
from tailreplay.cli.proxy_shadow import (
    base_url,
    refuse_without_shadow,
    shadow_config,
    shadow_options,
)
from tailreplay.errors import InputError, TailreplayError, UsageError
from tailreplay.exporters.otlp_options import OtlpOptions
from tailreplay.traces.text.redact_targets import redact_url
from tailreplay.units import parse_duration, parse_host_port, parse_http_url

if TYPE_CHECKING:
    from tailreplay.proxy.config import ProxyConfig, Route

__all__ = ["proxy"]


def _route(text: str, flag: str) -> Route:
    from tailreplay.proxy.config import Route

    prefix, sep, url = text.partition("=")
    if not sep or not prefix.startswith("/"):
        raise UsageError(f"invalid {flag} {text!r}: use /PREFIX=http://HOST:PORT")
    return Route(prefix, parse_http_url(url, flag))


def _admin(text: str, flag: str) -> tuple[str, int] | None:
    return None if text == "off" else parse_host_port(text, flag)


def _trusted(text: str, flag: str) -> tuple[IPv4Network | IPv6Network, ...]:
    from tailreplay.proxy.forwarding import parse_trusted

    return parse_trusted(text, flag) if text.strip() else ()


def _shed_after(text: str, flag: str) -> float | None:
    return None if text.strip().lower() == "off" else parse_duration(text)


@dataclass(frozen=True)
class _Args:
    """The command's options, parsed (the names are click's)."""

    upstream: URL
    listen: tuple[str, int]
    admin_listen: tuple[str, int] | None
    out_dir: Path
    prefix: str
    rotate_size: int
    rotate_interval: float
    compress: bool
    bodies: str
    sample: float
    redact_header: tuple[str, ...]
    routes: tuple[Route, ...]
    inject_usage: bool
    max_body: int
    timeout: float
    idle_timeout: float
    body_timeout: float
    max_connections: int | None
    max_connections_per_peer: int | None
    tls_cert: Path | None
    tls_key: Path | None
    drain_timeout: float
    trusted_proxies: tuple[IPv4Network | IPv6Network, ...]
    fingerprint_key_env: str | None
    sampling_key_file: Path | None
    workers: int
    shed_after: float | None
    otlp: OtlpOptions
    shadow_url: URL | None = None
    shadow_share: float = 0.1
    shadow_header: tuple[tuple[str, str], ...] = ()
    shadow_model_map: tuple[tuple[str, str], ...] = ()
    shadow_forward_auth: bool = False
    shadow_max_inflight: int = 64
    shadow_max_time: float = 300.0


@click.command()
@click.option(
    "--upstream",
    type=HTTP_URL,
    required=True,
    help="The endpoint to capture, e.g. http://127.0.0.1:8000.",
)
@click.option(
    "--listen",
    type=HOST_PORT,
    default="127.0.0.1:8080",
    show_default=True,
    help="HOST:PORT for clients.",
)
@click.option(
    "--tls-cert",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="PEM certificate (with its chain) for a TLS listener; needs --tls-key.",
)
@click.option(
    "--tls-key",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="PEM private key for --tls-cert.",
)
@click.option(
    "--admin-listen",
    type=Parsed("host:port|off", _admin),
    default="127.0.0.1:9464",
    show_default=True,
    help="HOST:PORT for /metrics and /healthz ('off' to disable).",
)
@click.option(
    "-o",
    "--out",
    "--output",
    "out_dir",
    default="captures",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Directory for archive files.",
)
@click.option("--prefix", default="capture", show_default=True, help="Archive file name prefix.")
@click.option(
    "--rotate-size",
    type=SIZE,
    default="256MiB",
    show_default=True,
    help="Start a new file past this size.",
)
@click.option(
    "--rotate-interval",
    type=DURATION,
    default="1h",
    show_default=True,
    help="Start a new file after this long.",
)
@click.option("--compress/--no-compress", default=False, help="Write .msgpack.zst files.")
@click.option(
    "--bodies",
    type=click.Choice(["none", "redacted", "full"]),
    default="none",
    show_default=True,
    help="What to keep of request bodies.",
)
@click.option(
    "--sample",
    type=FiniteRange(0, 1, min_open=True),
    default=1.0,
    show_default=True,
    help="Share of requests to record (by trace id; errors and slow ones always kept).",
)
@click.option("--redact-header", multiple=True, help="Another header to fingerprint (repeatable).")
@click.option(
    "--route",
    "routes",
    type=Parsed("/prefix=url", _route),
    multiple=True,
    help="PREFIX=URL: send paths under PREFIX to URL (repeatable).",
)
@click.option(
    "--inject-usage/--no-inject-usage",
    default=True,
    show_default=True,
    help="Ask streaming upstreams for usage, and strip it from the client's stream.",
)
@click.option(
    "--max-body",
    type=SIZE,
    default="10MiB",
    show_default=True,
    help="Largest request body accepted.",
)
@click.option(
    "--timeout",
    type=DURATION,
    default="600s",
    show_default=True,
    help="Upstream timeout per request.",
)
@click.option(
    "--idle-timeout",
    type=DURATION,
    default="60s",
    show_default=True,
    help="A client's time to send a whole request head (from connecting or its last response).",
)
@click.option(
    "--body-timeout",
    type=DURATION,
    default="30s",
    show_default=True,
    help="The longest pause allowed in the middle of a request body.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=None,
    help="Client connections at once (default: what the open-file limit allows); "
    "at the cap the longest-idle one is closed, else the one sending its body the "
    "slowest, or a 503.",
)
@click.option(
    "--max-connections-per-peer",
    type=click.IntRange(min=1),
    default=None,
    help="Client connections one client IP may hold (default: a quarter of "
    "--max-connections, at least 8); --trusted-proxies are exempt.",
)
@click.option(
    "--drain-timeout",
    type=DURATION,
    default="30s",
    show_default=True,
    help="How long SIGTERM waits for requests in flight.",
)
@click.option(
    "--trusted-proxies",
    type=Parsed("CIDR,...", _trusted),
    default="",
    help="Addresses and CIDR blocks of proxies in front of this one (e.g. a load "
    "balancer: 10.0.0.0/8,127.0.0.1) whose X-Forwarded-For chain is extended; from any "
    "other peer, X-Forwarded-*, Forwarded and X-Real-IP are dropped and the proxy sets "
    "its own (default: none trusted).",
)
@click.option(
    "--fingerprint-key-env",
    default=None,
    help="Environment variable holding the key for fingerprints (else a random key per run).",
)
@click.option(
    "--sampling-key-file",
    type=click.Path(path_type=Path),
    default=None,
    help="File holding a secret (16 bytes or more) that keys which traces --sample and "
    "--shadow-share pick; replicas given the same file pick alike (else a random key "
    "per run).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Processes sharing the listening port.",
)
@click.option(
    "--shed-after",
    type=Parsed("duration|off", _shed_after),
    default="0.5s",
    show_default=True,
    help="Record an exchange the recorder reaches this long after it ended without its "
    "prompt's body, hashes and statistics, so that a recorder short of CPU keeps every "
    "record ('off': never; past the pipe's limit records are then dropped).",
)
@shadow_options
@otlp_options()
def proxy(**options: Any) -> None:
    """Reverse proxy that records every exchange with an upstream into archives."""
    from tailreplay.proxy.server import RunningProxy, run

    refuse_without_shadow(click.get_current_context())
    config = _config(_Args(**options))
    for warning in _path_warnings(config):
        click.echo(f"warning: {warning}", err=True)

    def ready(p: RunningProxy) -> None:
        click.echo(f"tailreplay proxy listening on {p.url} -> {redact_url(str(config.upstream))}")
        if not _loopback(config.listen_host):
            click.echo(
                f"warning: --listen {config.listen_host}: any host that reaches this one can "
                "send through the proxy to the upstream, with its own credentials "
                "(127.0.0.1 keeps it to this machine; a sidecar's pod network is the usual "
                "reason to open it)",
                err=True,
            )
        if p.admin_url:
            click.echo(f"tailreplay proxy admin on {p.admin_url}")
        click.echo(f"recording into {config.out_dir}/")
        if (shadow := config.shadow) is not None:
            click.echo(
                f"shadowing {shadow.share * 100:.4g}% of generating requests to "
                f"{redact_url(str(shadow.url))} (recorded beside production's)"
            )
        sys.stdout.flush()

    if config.workers > 1:
        from tailreplay.proxy.shared_port import run_workers

        run_workers(config, click.echo)
        return
    try:
        counts = asyncio.run(run(config, ready))
    except OSError as exc:
        raise TailreplayError(f"cannot start the proxy: {exc.strerror or exc}") from None
    click.echo(f"archives closed in {config.out_dir}/: {counts.summary()}")


def _path_warnings(config: ProxyConfig) -> list[str]:
    """An upstream (or a route's) whose path ends in /v1, which clients add themselves."""
    from tailreplay.proxy.upstream_path import v1_warning

    found = [v1_warning("--upstream", config.upstream)]
    found += [v1_warning(f"--route {r.prefix}=", r.upstream) for r in config.routes]
    return [w for w in found if w is not None]


def _loopback(host: str) -> bool:
    """Whether ``host`` listens on loopback only (a name other than localhost is not
    resolved here: it is taken as open)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _config(args: _Args) -> ProxyConfig:
    from tailreplay.exporters.spans import proxy_spans
    from tailreplay.proxy.config import ProxyConfig

    base_url("--upstream", args.upstream)
    for route in args.routes:
        base_url(f"--route {route.prefix}=", route.upstream)
    host, port = args.listen
    if args.workers > 1 and port == 0:
        raise UsageError("--workers needs a fixed --listen port (workers share it)")
    admin_host, admin_port = args.admin_listen or (None, None)
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    if args.tls_cert is not None and args.tls_key is not None:
        from tailreplay.proxy.server import server_context

        server_context(args.tls_cert, args.tls_key)  # unusable files: one line, at start
    key = _fingerprint_key(args.fingerprint_key_env)
    sampling = _sampling_key(args.sampling_key_file)
    secret_names = frozenset(h.lower() for h in args.redact_header)
    return ProxyConfig(
        upstream=args.upstream,
        listen_host=host,
        listen_port=port,
        admin_host=admin_host or "127.0.0.1",
        admin_port=admin_port,
        out_dir=args.out_dir,
        prefix=args.prefix,
        rotate_bytes=args.rotate_size,
        rotate_interval_s=args.rotate_interval,
        compress=args.compress,
        bodies=args.bodies,
        sample=args.sample,
        redact_headers=secret_names,
        routes=args.routes,
        inject_usage=args.inject_usage,
        max_body=args.max_body,
        timeout_s=args.timeout,
        idle_timeout_s=args.idle_timeout,
        body_timeout_s=args.body_timeout,
        max_connections=args.max_connections,
        max_connections_per_peer=args.max_connections_per_peer,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        drain_timeout_s=args.drain_timeout,
        trusted_proxies=args.trusted_proxies,
        fingerprint_key=key,
        sampling_key=sampling,
        workers=args.workers,
        shed_after_s=args.shed_after,
        shadow=shadow_config(
            args.shadow_url,
            share=args.shadow_share,
            headers=args.shadow_header,
            model_map=args.shadow_model_map,
            forward_auth=args.shadow_forward_auth,
            max_inflight=args.shadow_max_inflight,
            max_time_s=args.shadow_max_time,
            secret_names=secret_names,
            production=[args.upstream, *(r.upstream for r in args.routes)],
            listen=args.listen,
        ),
        spans=functools.partial(proxy_spans, args.otlp, (host, port), key, sampling)
        if args.otlp.enabled
        else None,
    )


def _fingerprint_key(env: str | None) -> bytes:
    """The key for fingerprints: the named variable's value, else random for this run."""
    if env is None:
        return os.urandom(32)
    secret = os.environ.get(env)
    if not secret:
        raise UsageError(f"--fingerprint-key-env {env}: the variable is not set")
    return secret.encode()


_MAX_SECRET_BYTES = 4096


def _sampling_key(path: Path | None) -> bytes:
    """The sampling key: derived from the secret in ``path``, else random for this run.
    Its content is never echoed, whatever is wrong with it."""
    from tailreplay.sampling import MIN_SECRET_BYTES, key_from_secret, new_key

    if path is None:
        return new_key()
    try:
        with path.open("rb") as f:
            secret = f.read(_MAX_SECRET_BYTES + 1).strip()
    except OSError as exc:
        raise InputError(
            f"--sampling-key-file {path}: cannot read it ({exc.strerror or exc})"
        ) from None
    if len(secret) > _MAX_SECRET_BYTES:
        raise UsageError(
            f"--sampling-key-file {path}: over {_MAX_SECRET_BYTES} bytes; the file holds one secret"
        )
    if len(secret) < MIN_SECRET_BYTES:
        raise UsageError(
            f"--sampling-key-file {path}: holds {len(secret)} bytes; a secret has at least "
            f"{MIN_SECRET_BYTES} (e.g. head -c 32 /dev/urandom | base64 > FILE)"
        )
    return key_from_secret(secret)
