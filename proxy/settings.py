"""``tailreplay proxy``'s options, typed and declared once: each field carries its
flags, how its text is read, its default, range and help (``tailreplay/declared.py``).
The command line generates its click options from these fields and builds the
``ProxyConfig`` from a ``ProxyOptions`` and a ``ShadowOptions``; the configs default
to the same declarations (``default_of``)."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path

from yarl import URL

from tailreplay.declared import Choice, PathKind, Setting, Text, declared
from tailreplay.errors import UsageError
from tailreplay.option_values import (
    DURATION,
    DURATION_ABOVE_0,
    HEADER,
    HEADER_NAME,
    HOST_PORT,
    HTTP_URL,
    MODEL_MAP,
    NAME_PREFIX,
    SIZE_ABOVE_0,
)
from tailreplay.proxy.forwarding import parse_trusted
from tailreplay.sampling import share_threshold
from tailreplay.units import parse_duration, parse_host_port, parse_http_url

__all__ = ["BODY_MODES", "ProxyOptions", "Route", "ShadowOptions"]

BODY_MODES = ("none", "redacted", "full")


@dataclass(frozen=True, slots=True)
class Route:
    """Requests whose path starts with ``prefix`` go to ``upstream``."""

    prefix: str
    upstream: URL


def _route(text: str, flag: str) -> Route:
    prefix, sep, url = text.partition("=")
    if not sep or not prefix.startswith("/"):
        raise UsageError(f"invalid {flag} {text!r}: use /PREFIX=http://HOST:PORT")
    return Route(prefix, parse_http_url(url, flag))


def _admin(text: str, flag: str) -> tuple[str, int] | None:
    return None if text == "off" else parse_host_port(text, flag)


def _trusted(text: str, flag: str) -> tuple[IPv4Network | IPv6Network, ...]:
    return parse_trusted(text, flag) if text.strip() else ()


def _shed_after(text: str, flag: str) -> float | None:
    return None if text.strip().lower() == "off" else parse_duration(text)


_FILE = PathKind(dir_okay=False)


@dataclass(frozen=True)
class ProxyOptions:
    """The proxy's own options, parsed (the names are click's)."""

    upstream: URL = declared(
        Setting(
            "--upstream",
            None,
            "The endpoint to capture, e.g. http://127.0.0.1:8000.",
            kind=HTTP_URL,
            required=True,
        )
    )
    listen: tuple[str, int] = declared(
        Setting(
            "--listen",
            "127.0.0.1:8080",
            "HOST:PORT for clients.",
            kind=HOST_PORT,
            show_default=True,
        )
    )
    tls_cert: Path | None = declared(
        Setting(
            "--tls-cert",
            None,
            "PEM certificate (with its chain) for a TLS listener; needs --tls-key.",
            kind=_FILE,
        )
    )
    tls_key: Path | None = declared(
        Setting("--tls-key", None, "PEM private key for --tls-cert.", kind=_FILE)
    )
    admin_listen: tuple[str, int] | None = declared(
        Setting(
            "--admin-listen",
            "127.0.0.1:9464",
            "HOST:PORT for /metrics and /healthz ('off' to disable).",
            kind=Text("host:port|off", _admin),
            show_default=True,
        )
    )
    out_dir: Path = declared(
        Setting(
            "--out",
            "captures",
            "Directory for archive files.",
            kind=PathKind(),
            short="-o",
            aliases=("--output",),
            show_default=True,
        )
    )
    prefix: str = declared(
        Setting(
            "--prefix", "capture", "Archive file name prefix.", kind=NAME_PREFIX, show_default=True
        )
    )
    rotate_size: int = declared(
        Setting(
            "--rotate-size",
            "256MiB",
            "Start a new file past this size.",
            kind=SIZE_ABOVE_0,
            show_default=True,
        )
    )
    rotate_interval: float = declared(
        Setting(
            "--rotate-interval",
            "1h",
            "Start a new file after this long.",
            kind=DURATION_ABOVE_0,
            show_default=True,
        )
    )
    compress: bool = declared(
        Setting("--compress", False, "Write .msgpack.zst files.", off="--no-compress")
    )
    bodies: str = declared(
        Setting(
            "--bodies",
            "none",
            "What to keep of request bodies.",
            kind=Choice(BODY_MODES),
            show_default=True,
        )
    )
    sample: float = declared(
        Setting(
            "--sample",
            1.0,
            "Share of requests to record (by trace id; errors and slow ones always kept).",
            low=0,
            high=1,
            low_open=True,
            show_default=True,
        )
    )
    redact_header: tuple[str, ...] = declared(
        Setting(
            "--redact-header",
            None,
            "Another header to fingerprint (repeatable).",
            kind=HEADER_NAME,
            multiple=True,
        )
    )
    routes: tuple[Route, ...] = declared(
        Setting(
            "--route",
            None,
            "PREFIX=URL: send paths under PREFIX to URL (repeatable).",
            kind=Text("/prefix=url", _route),
            multiple=True,
        )
    )
    inject_usage: bool = declared(
        Setting(
            "--inject-usage",
            True,
            "Ask streaming upstreams for usage, and strip it from the client's stream.",
            off="--no-inject-usage",
            show_default=True,
        )
    )
    max_body: int = declared(
        Setting(
            "--max-body",
            "10MiB",
            "Largest request body accepted.",
            kind=SIZE_ABOVE_0,
            show_default=True,
        )
    )
    timeout: float = declared(
        Setting(
            "--timeout",
            "600s",
            "Upstream timeout per request.",
            kind=DURATION_ABOVE_0,
            show_default=True,
        )
    )
    idle_timeout: float = declared(
        Setting(
            "--idle-timeout",
            "60s",
            "A client's time to send a whole request head (from connecting or its last response).",
            kind=DURATION_ABOVE_0,
            show_default=True,
        )
    )
    body_timeout: float = declared(
        Setting(
            "--body-timeout",
            "30s",
            "The longest pause allowed in the middle of a request body.",
            kind=DURATION_ABOVE_0,
            show_default=True,
        )
    )
    max_connections: int | None = declared(
        Setting(
            "--max-connections",
            None,
            "Client connections at once (default: what the open-file limit allows); "
            "at the cap the longest-idle one is closed, else the one sending its body the "
            "slowest, or a 503.",
            kind=int,
            low=1,
        )
    )
    max_connections_per_peer: int | None = declared(
        Setting(
            "--max-connections-per-peer",
            None,
            "Client connections one client IP may hold (default: a quarter of "
            "--max-connections, at least 8); --trusted-proxies are exempt.",
            kind=int,
            low=1,
        )
    )
    drain_timeout: float = declared(
        Setting(
            "--drain-timeout",
            "30s",
            "How long SIGTERM waits for requests in flight.",
            kind=DURATION,
            show_default=True,
        )
    )
    trusted_proxies: tuple[IPv4Network | IPv6Network, ...] = declared(
        Setting(
            "--trusted-proxies",
            "",
            "Addresses and CIDR blocks of proxies in front of this one (e.g. a load "
            "balancer: 10.0.0.0/8,127.0.0.1) whose X-Forwarded-For chain is extended; from "
            "any other peer, X-Forwarded-*, Forwarded and X-Real-IP are dropped and the proxy "
            "sets its own (default: none trusted).",
            kind=Text("CIDR,...", _trusted),
        )
    )
    fingerprint_key_env: str | None = declared(
        Setting(
            "--fingerprint-key-env",
            None,
            "Environment variable holding the key for fingerprints (else a random key per run).",
        )
    )
    sampling_key_file: Path | None = declared(
        Setting(
            "--sampling-key-file",
            None,
            "File holding a secret (16 bytes or more) that keys which traces --sample and "
            "--shadow-share pick; replicas given the same file pick alike (else a random key "
            "per run).",
            kind=PathKind(),
        )
    )
    workers: int = declared(
        Setting(
            "--workers",
            1,
            "Processes sharing the listening port.",
            kind=int,
            low=1,
            show_default=True,
        )
    )
    shed_after: float | None = declared(
        Setting(
            "--shed-after",
            "0.5s",
            "Record an exchange the recorder reaches this long after it ended without its "
            "prompt's body, hashes and statistics, so that a recorder short of CPU keeps every "
            "record ('off': never; past the pipe's limit records are then dropped).",
            kind=Text("duration|off", _shed_after),
            show_default=True,
        )
    )


def _share(text: str, flag: str) -> float:
    """A share in percent (``10%``), over 0% and at most 100%. A bare number is refused:
    ``1`` could mean 1% or all of production's traffic."""
    stripped = text.strip()
    if not stripped.endswith("%"):
        raise ValueError(
            f"{flag} {text}: give the share in percent, e.g. 10% (a bare number is "
            "ambiguous: 1 could be 1% or 100%)"
        )
    try:
        value = float(stripped.removesuffix("%")) / 100
    except ValueError:
        raise ValueError(f"{flag} {text}: give the share in percent, e.g. 10%") from None
    if not 0 < value <= 1:
        raise ValueError(f"{flag} {text}: a share is over 0% and at most 100% (e.g. 10%)")
    if share_threshold(value) == 0:
        raise ValueError(f"{flag} {text}: too small a share to pick any trace id")
    return value


@dataclass(frozen=True)
class ShadowOptions:
    """``--shadow`` and the options that shape its copies (``proxy/shadow.py``)."""

    shadow_url: URL | None = declared(
        Setting(
            "--shadow",
            None,
            "Copy a share of generating requests to this target too, off the request "
            "path; its answers are recorded beside production's (docs/shadow.md).",
            kind=HTTP_URL,
        )
    )
    shadow_share: float = declared(
        Setting(
            "--shadow-share",
            "10%",
            "Share of generating requests copied, by trace id (a session's go together).",
            kind=Text("share", _share),
            show_default=True,
        )
    )
    shadow_header: tuple[tuple[str, str], ...] = declared(
        Setting(
            "--shadow-header",
            None,
            "'Name: value' sent with every copy (repeatable), e.g. the shadow's own Authorization.",
            kind=HEADER,
            multiple=True,
        )
    )
    shadow_model_map: tuple[tuple[str, str], ...] = declared(
        Setting(
            "--shadow-model-map",
            None,
            "A=B: a copy of a request for model A asks the shadow for B (repeatable).",
            kind=MODEL_MAP,
            multiple=True,
        )
    )
    shadow_forward_auth: bool = declared(
        Setting(
            "--shadow-forward-auth",
            False,
            "Send the client's own credentials to the shadow: by default every header "
            "and query parameter the recorder redacts as a credential (Authorization, "
            "api-key, X-Goog-Api-Key, ?key=, --redact-header ...), Cookie and the OpenAI "
            "account headers stay behind.",
            is_flag=True,
        )
    )
    shadow_max_inflight: int = declared(
        Setting(
            "--shadow-max-inflight",
            64,
            "Copies in flight at once; more are dropped and counted.",
            kind=int,
            low=1,
            show_default=True,
        )
    )
    shadow_max_time: float = declared(
        Setting(
            "--shadow-max-time",
            "300s",
            "A copy's whole exchange with the shadow (under --timeout when shorter); "
            "past it the copy is cut and counted.",
            kind=DURATION,
            show_default=True,
        )
    )
