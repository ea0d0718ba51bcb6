"""What the user asked of OTLP export (``--otlp-*`` and the ``OTEL_EXPORTER_OTLP_*``
variables), apart from the exporter that acts on it (``otlp.py``): commands parse the
options without loading the OpenTelemetry SDK, which a run without an endpoint never
needs (60 ms of every command's start)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from yarl import URL

from tailreplay.declared import Choice, PathKind, Setting, declared
from tailreplay.errors import UsageError
from tailreplay.option_values import DURATION, KEY_VALUE
from tailreplay.traces.text.redact_targets import redact_url
from tailreplay.units import port_problem

__all__ = ["LIVE_TRAFFIC", "PROTOCOLS", "OtlpOptions"]

PROTOCOLS = ("grpc", "http/protobuf")
_ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_ENV = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


_PEM = PathKind(exists=True, dir_okay=False, read=True)
LIVE_TRAFFIC = "live_traffic"
"""A field's metadata key: an option of spans made of live traffic (the proxy's and the
replayer's), not of an archive's export, which sends every record."""


@dataclass(frozen=True)
class OtlpOptions:
    """The OTLP flags, declared once (``tailreplay/declared.py``) for every command that
    exports spans; each click parameter is named ``otlp_...`` (``Setting.name``), apart
    from the command's own options."""

    endpoint: str | None = declared(
        Setting(
            "--otlp-endpoint",
            None,
            "Send spans here, e.g. http://127.0.0.1:4318/v1/traces or "
            "http://127.0.0.1:4317 (gRPC); also OTEL_EXPORTER_OTLP_ENDPOINT.",
            name="otlp_endpoint",
        )
    )
    protocol: str | None = declared(
        Setting(
            "--otlp-protocol",
            None,
            "Default: OTEL_EXPORTER_OTLP_PROTOCOL, else gRPC for port 4317, else HTTP.",
            kind=Choice(PROTOCOLS),
            name="otlp_protocol",
        )
    )
    """grpc or http/protobuf; None: from the environment, else inferred from the endpoint."""
    headers: tuple[tuple[str, str], ...] = declared(
        Setting(
            "--otlp-header",
            None,
            "K=V sent with every export (repeatable), e.g. authorization=Bearer ...",
            kind=KEY_VALUE,
            multiple=True,
            name="otlp_headers",
        )
    )
    ca: Path | None = declared(
        Setting("--otlp-ca", None, "CA certificate (PEM) to trust.", kind=_PEM, name="otlp_ca")
    )
    cert: Path | None = declared(
        Setting(
            "--otlp-cert", None, "Client certificate (PEM) for mTLS.", kind=_PEM, name="otlp_cert"
        )
    )
    key: Path | None = declared(
        Setting(
            "--otlp-key", None, "Client private key (PEM) for mTLS.", kind=_PEM, name="otlp_key"
        )
    )
    insecure: bool = declared(
        Setting(
            "--otlp-insecure",
            False,
            "gRPC without TLS (as OTEL_EXPORTER_OTLP_INSECURE); OTLP/HTTP follows "
            "the endpoint's scheme.",
            is_flag=True,
            name="otlp_insecure",
        )
    )
    timeout_s: float = declared(
        Setting(
            "--otlp-timeout",
            "5s",
            "Per export request.",
            kind=DURATION,
            show_default=True,
            name="otlp_timeout",
        )
    )
    resource: tuple[tuple[str, str], ...] = declared(
        Setting(
            "--resource",
            None,
            "K=V resource attribute (repeatable), e.g. deployment.environment=staging.",
            kind=KEY_VALUE,
            multiple=True,
            name="resource_attrs",
        )
    )
    trace_sample: float = declared(
        Setting(
            "--trace-sample",
            1.0,
            "Share of traces to export (by trace id; errors and the tail always).",
            low=0,
            high=1,
            low_open=True,
            show_default=True,
        ),
        **{LIVE_TRAFFIC: True},
    )
    capture_content: bool = declared(
        Setting(
            "--otlp-capture-content",
            False,
            "Put prompt and completion text in spans (off: they may hold personal data).",
            is_flag=True,
            name="otlp_capture_content",
        ),
        **{LIVE_TRAFFIC: True},
    )
    provider_name: str = declared(
        Setting(
            "--gen-ai-provider",
            "openai",
            "gen_ai.provider.name on spans.",
            show_default=True,
            name="gen_ai_provider",
        ),
        **{LIVE_TRAFFIC: True},
    )
    """gen_ai.provider.name on every span."""

    @property
    def enabled(self) -> bool:
        return self.resolved_endpoint() is not None

    def resolved_endpoint(self) -> str | None:
        """The endpoint the exporter will use: the flag, else the environment's; a
        UsageError when it is not a URL the exporters can send to."""
        if self.endpoint is not None:
            return _checked(self.endpoint, "--otlp-endpoint")
        for name in _ENDPOINT_ENV:
            if endpoint := os.environ.get(name):
                return _checked(endpoint, name)
        return None

    def shown_endpoint(self) -> str:
        """The endpoint as log lines show it: credentials in the URL masked."""
        endpoint = self.resolved_endpoint()
        return redact_url(endpoint) if endpoint is not None else "the OTLP endpoint"

    def resolved_protocol(self) -> str:
        """The flag, else OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else what the endpoint implies:
        port 4317 or a grpc:// scheme mean gRPC, anything else OTLP/HTTP."""
        protocol = self.protocol or next(
            (p for v in _PROTOCOL_ENV if (p := os.environ.get(v))), None
        )
        if protocol is not None:
            if protocol not in PROTOCOLS:
                raise UsageError(f"invalid OTLP protocol {protocol!r}: use grpc or http/protobuf")
            return protocol
        endpoint = self.resolved_endpoint()
        if endpoint is not None:
            url = URL(endpoint)
            if url.scheme in ("grpc", "grpcs") or url.port == 4317:
                return "grpc"
        return "http/protobuf"


_SCHEMES = ("http", "https", "grpc", "grpcs")


def _checked(endpoint: str, given_as: str) -> str:
    """``endpoint`` if it is an http(s) or grpc(s) URL with a host, else a UsageError
    naming where it was given (the exporter would fail on it at its first batch, in a
    process of its own, or send nothing without a word)."""
    try:
        url = URL(endpoint)
        host, scheme = url.host, url.scheme
    except ValueError as exc:
        raise UsageError(f"{given_as}: not a URL ({exc})") from None
    if scheme not in _SCHEMES or not host:
        shown = redact_url(endpoint)
        raise UsageError(
            f"{given_as}: {shown!r} is not an http(s):// or grpc(s):// URL with a host "
            "(e.g. http://127.0.0.1:4318/v1/traces)"
        )
    problem = port_problem(endpoint, url)
    if problem is not None:
        raise UsageError(f"{given_as}: {redact_url(endpoint)!r}: {problem}")
    return endpoint
