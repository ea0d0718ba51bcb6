"""What the user asked of OTLP export (``--otlp-*`` and the ``OTEL_EXPORTER_OTLP_*``
variables), apart from the exporter that acts on it (``otlp.py``): commands parse the
options without loading the OpenTelemetry SDK, which a run without an endpoint never
needs (60 ms of every command's start)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from yarl import URL

from tailreplay.errors import UsageError
from tailreplay.traces.text.redact_targets import redact_url

__all__ = ["PROTOCOLS", "OtlpOptions"]

PROTOCOLS = ("grpc", "http/protobuf")
_ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_ENV = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


@dataclass(frozen=True)
class OtlpOptions:
    endpoint: str | None = None
    protocol: str | None = None
    """grpc or http/protobuf; None: from the environment, else inferred from the endpoint."""
    headers: tuple[tuple[str, str], ...] = ()
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    insecure: bool = False
    resource: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 5.0
    trace_sample: float = 1.0
    capture_content: bool = False
    provider_name: str = "openai"
    """gen_ai.provider.name on every span."""

    @property
    def enabled(self) -> bool:
        return self.resolved_endpoint() is not None

    def resolved_endpoint(self) -> str | None:
        """The endpoint the exporter will use: the flag, else the environment's."""
        if self.endpoint is not None:
            return self.endpoint
        return next((e for v in _ENDPOINT_ENV if (e := os.environ.get(v))), None)

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
