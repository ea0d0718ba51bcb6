"""``tailreplay proxy``: the capturing reverse proxy."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tailreplay.cli.option_fields import declared_options, take
from tailreplay.cli.options import otlp_options
from tailreplay.cli.proxy_shadow import base_url, refuse_without_shadow, shadow_config
from tailreplay.errors import InputError, TailreplayError, UsageError
from tailreplay.exporters.otlp_options import OtlpOptions
from tailreplay.proxy.settings import ProxyOptions, ShadowOptions
from tailreplay.traces.text.redact_targets import redact_url

if TYPE_CHECKING:
    from tailreplay.proxy.config import ProxyConfig

__all__ = ["proxy"]


@click.command()
@declared_options(ProxyOptions)
@declared_options(ShadowOptions)
@otlp_options()
def proxy(**options: Any) -> None:
    """Reverse proxy that records every exchange with an upstream into archives."""
    from tailreplay.proxy.server import RunningProxy, run

    refuse_without_shadow(click.get_current_context())
    own, shadow = take(ProxyOptions, options), take(ShadowOptions, options)
    config = _config(own, shadow, options["otlp"])
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


def _config(args: ProxyOptions, shadow: ShadowOptions, otlp: OtlpOptions) -> ProxyConfig:
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
            shadow,
            secret_names=secret_names,
            production=[args.upstream, *(r.upstream for r in args.routes)],
            listen=args.listen,
        ),
        spans=functools.partial(proxy_spans, otlp, (host, port), key, sampling)
        if otlp.enabled
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
