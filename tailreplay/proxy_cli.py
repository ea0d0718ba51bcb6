"""``tailreplay proxy``: the capturing reverse proxy."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import click
from yarl import URL

from tailreplay.errors import TailreplayError, UsageError
from tailreplay.exporters.otlp import OtlpOptions
from tailreplay.otlp_cli import otlp_options
from tailreplay.units import parse_duration, parse_host_port, parse_size

__all__ = ["parse_upstream", "proxy"]


def parse_upstream(text: str, flag: str = "--upstream") -> URL:
    url = URL(text)
    if url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"invalid {flag} {text!r}: use http(s)://HOST[:PORT][/PATH]")
    return url


@click.command()
@click.option(
    "--upstream", required=True, help="The endpoint to capture, e.g. http://127.0.0.1:8000."
)
@click.option(
    "--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT for clients."
)
@click.option(
    "--admin-listen",
    default="127.0.0.1:9464",
    show_default=True,
    help="HOST:PORT for /metrics and /healthz ('off' to disable).",
)
@click.option(
    "--out",
    "out_dir",
    default="captures",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Directory for archive files.",
)
@click.option("--prefix", default="capture", show_default=True, help="Archive file name prefix.")
@click.option(
    "--rotate-size", default="256MiB", show_default=True, help="Start a new file past this size."
)
@click.option(
    "--rotate-interval", default="1h", show_default=True, help="Start a new file after this long."
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
    default=1.0,
    show_default=True,
    help="Share of requests to record (by trace id; errors and slow ones always kept).",
)
@click.option("--redact-header", multiple=True, help="Another header to fingerprint (repeatable).")
@click.option(
    "--route",
    "routes",
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
    "--max-body", default="10MiB", show_default=True, help="Largest request body accepted."
)
@click.option("--timeout", default="600s", show_default=True, help="Upstream timeout per request.")
@click.option(
    "--drain-timeout",
    default="30s",
    show_default=True,
    help="How long SIGTERM waits for requests in flight.",
)
@click.option(
    "--fingerprint-key-env",
    default=None,
    help="Environment variable holding the key for fingerprints (else a random key per run).",
)
@click.option(
    "--workers", default=1, show_default=True, help="Processes sharing the listening port."
)
@otlp_options()
def proxy(
    upstream: str,
    listen: str,
    admin_listen: str,
    out_dir: Path,
    prefix: str,
    rotate_size: str,
    rotate_interval: str,
    compress: bool,
    bodies: str,
    sample: float,
    redact_header: tuple[str, ...],
    routes: tuple[str, ...],
    inject_usage: bool,
    max_body: str,
    timeout: str,
    drain_timeout: str,
    fingerprint_key_env: str | None,
    workers: int,
    otlp: OtlpOptions,
) -> None:
    """Reverse proxy that records every exchange with an upstream into archives."""
    from tailreplay.proxy.config import ProxyConfig, Route
    from tailreplay.proxy.server import RunningProxy, run

    if not 0.0 < sample <= 1.0:
        raise UsageError(f"invalid --sample {sample}: use a share in (0, 1]")
    if workers < 1:
        raise UsageError("--workers must be at least 1")
    parsed_routes = []
    for r in routes:
        prefix_, sep, url = r.partition("=")
        if not sep or not prefix_.startswith("/"):
            raise UsageError(f"invalid --route {r!r}: use /PREFIX=http://HOST:PORT")
        parsed_routes.append(Route(prefix_, parse_upstream(url, "--route")))
    key = os.urandom(32)
    if fingerprint_key_env is not None:
        secret = os.environ.get(fingerprint_key_env)
        if not secret:
            raise UsageError(
                f"--fingerprint-key-env {fingerprint_key_env}: the variable is not set"
            )
        key = secret.encode()
    host, port = parse_host_port(listen, "--listen")
    if workers > 1 and port == 0:
        raise UsageError("--workers needs a fixed --listen port (workers share it)")
    admin_host, admin_port = (
        (None, None) if admin_listen == "off" else parse_host_port(admin_listen, "--admin-listen")
    )
    config = ProxyConfig(
        upstream=parse_upstream(upstream),
        listen_host=host,
        listen_port=port,
        admin_host=admin_host or "127.0.0.1",
        admin_port=admin_port,
        out_dir=out_dir,
        prefix=prefix,
        rotate_bytes=parse_size(rotate_size),
        rotate_interval_s=parse_duration(rotate_interval),
        compress=compress,
        bodies=bodies,
        sample=sample,
        redact_headers=frozenset(h.lower() for h in redact_header),
        routes=tuple(parsed_routes),
        inject_usage=inject_usage,
        max_body=parse_size(max_body),
        timeout_s=parse_duration(timeout),
        drain_timeout_s=parse_duration(drain_timeout),
        fingerprint_key=key,
        workers=workers,
        otlp=otlp if otlp.enabled else None,
    )

    def ready(p: RunningProxy) -> None:
        click.echo(f"tailreplay proxy listening on {p.url} -> {config.upstream}")
        if p.admin_url:
            click.echo(f"tailreplay proxy admin on {p.admin_url}")
        click.echo(f"recording into {config.out_dir}/")
        sys.stdout.flush()

    if workers > 1:
        from tailreplay.proxy.workers import run_workers

        run_workers(config, click.echo)
        return
    try:
        asyncio.run(run(config, ready))
    except OSError as exc:
        raise TailreplayError(f"cannot start the proxy: {exc.strerror or exc}") from None
