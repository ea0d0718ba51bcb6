"""The OTLP flags, shared by ``proxy``, ``replay`` and ``traces export otlp``.

``otlp_options()`` adds the same flags to each command and hands the command one
``otlp: OtlpOptions`` argument instead of a dozen loose ones, so the three
commands cannot drift apart.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from tailreplay.errors import UsageError
from tailreplay.exporters.otlp import PROTOCOLS, OtlpOptions
from tailreplay.units import parse_duration

__all__ = ["otlp_options"]

F = TypeVar("F", bound=Callable[..., Any])

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def _pairs(items: tuple[str, ...], flag: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"invalid {flag} {item!r}: use KEY=VALUE")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def otlp_options(*, spans_of_live_traffic: bool = True) -> Callable[[F], F]:
    """Click options for OTLP export; ``spans_of_live_traffic`` adds the sampling and
    content flags (the proxy and the replayer; an archive export sends every record)."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            cert, key = kwargs.pop("otlp_cert"), kwargs.pop("otlp_key")
            if (cert is None) != (key is None):
                raise UsageError("--otlp-cert and --otlp-key go together (mTLS needs both)")
            sample = kwargs.pop("trace_sample", 1.0)
            if not 0.0 < sample <= 1.0:
                raise UsageError(f"invalid --trace-sample {sample}: use a share in (0, 1]")
            kwargs["otlp"] = OtlpOptions(
                endpoint=kwargs.pop("otlp_endpoint"),
                protocol=kwargs.pop("otlp_protocol"),
                headers=_pairs(kwargs.pop("otlp_headers"), "--otlp-header"),
                ca=kwargs.pop("otlp_ca"),
                cert=cert,
                key=key,
                insecure=kwargs.pop("otlp_insecure"),
                resource=_pairs(kwargs.pop("resource_attrs"), "--resource"),
                timeout_s=parse_duration(kwargs.pop("otlp_timeout")),
                trace_sample=sample,
                capture_content=kwargs.pop("otlp_capture_content", False),
                provider_name=kwargs.pop("gen_ai_provider", "openai"),
            )
            return func(*args, **kwargs)

        options = [
            click.option(
                "--otlp-endpoint",
                help="Send spans here, e.g. http://127.0.0.1:4318/v1/traces or "
                "http://127.0.0.1:4317 (gRPC); also OTEL_EXPORTER_OTLP_ENDPOINT.",
            ),
            click.option(
                "--otlp-protocol",
                type=click.Choice(PROTOCOLS),
                help="Default: OTEL_EXPORTER_OTLP_PROTOCOL, else gRPC for port 4317, else HTTP.",
            ),
            click.option(
                "--otlp-header",
                "otlp_headers",
                multiple=True,
                help="K=V sent with every export (repeatable), e.g. authorization=Bearer ...",
            ),
            click.option("--otlp-ca", type=_FILE, help="CA certificate (PEM) to trust."),
            click.option("--otlp-cert", type=_FILE, help="Client certificate (PEM) for mTLS."),
            click.option("--otlp-key", type=_FILE, help="Client private key (PEM) for mTLS."),
            click.option(
                "--otlp-insecure",
                is_flag=True,
                help="gRPC without TLS (as OTEL_EXPORTER_OTLP_INSECURE); OTLP/HTTP follows "
                "the endpoint's scheme.",
            ),
            click.option(
                "--otlp-timeout", default="5s", show_default=True, help="Per export request."
            ),
            click.option(
                "--resource",
                "resource_attrs",
                multiple=True,
                help="K=V resource attribute (repeatable), e.g. deployment.environment=staging.",
            ),
        ]
        if spans_of_live_traffic:
            options += [
                click.option(
                    "--trace-sample",
                    default=1.0,
                    show_default=True,
                    help="Share of traces to export (by trace id; errors and the tail always).",
                ),
                click.option(
                    "--otlp-capture-content",
                    is_flag=True,
                    help="Put prompt and completion text in spans (off: they may hold "
                    "personal data).",
                ),
                click.option(
                    "--gen-ai-provider",
                    default="openai",
                    show_default=True,
                    help="gen_ai.provider.name on spans.",
                ),
            ]
        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper  # type: ignore[return-value]

    return decorate
