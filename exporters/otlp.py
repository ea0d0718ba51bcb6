"""OTLP export: the one place that turns command-line options into a TracerProvider.

``OtlpOptions`` holds what the user asked for (picklable: the proxy builds its
provider in the recorder process); ``Telemetry.start`` builds a provider of our
own — never the global one, so a library in the same process cannot send our
spans elsewhere — with a BatchSpanProcessor and an exporter for gRPC or
OTLP/HTTP, TLS, mTLS and extra headers. Options left unset fall back to the
standard ``OTEL_EXPORTER_OTLP_*`` and ``OTEL_RESOURCE_ATTRIBUTES`` variables,
because the exporters read those themselves when given None.

A dead or slow collector must not change a run: export happens on the
processor's thread, failures become one warning line (the SDK's own retry logs
are silenced), and ``close`` gives up after a bounded flush.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Tracer
from yarl import URL

from tailreplay.exporters.otlp_options import PROTOCOLS, OtlpOptions
from tailreplay.version import __version__

__all__ = ["PROTOCOLS", "OtlpOptions", "SyncBatches", "Telemetry", "make_exporter"]


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


def make_exporter(options: OtlpOptions) -> SpanExporter:
    """The OTLP span exporter the options describe (gRPC or HTTP/protobuf)."""
    endpoint = options.endpoint
    headers = dict(options.headers) or None
    protocol = options.resolved_protocol()
    if protocol == "grpc":
        import grpc  # type: ignore[import-untyped]
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        credentials = None
        insecure: bool | None = True if options.insecure else None
        if endpoint is not None:
            url = URL(endpoint)
            if url.scheme in ("grpc", "grpcs"):  # not schemes gRPC knows: host:port it is
                endpoint = f"{url.host}:{url.port}"
                insecure = insecure or url.scheme == "grpc"
        if options.ca or options.cert:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(options.ca),
                private_key=_read(options.key),
                certificate_chain=_read(options.cert),
            )
            insecure = False
        return GrpcExporter(
            endpoint=endpoint,
            insecure=insecure,
            credentials=credentials,
            headers=headers,
            timeout=options.timeout_s,
        )

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    if endpoint is not None and URL(endpoint).path in ("", "/"):
        # Collectors listen for OTLP/HTTP traces on /v1/traces; a bare base URL is a
        # common slip, and the exporter would post to "/" and get a 404 per batch.
        endpoint = str(URL(endpoint).with_path("/v1/traces"))
    session = None
    if options.ca is not None:
        import requests

        # requests lets REQUESTS_CA_BUNDLE (set on many machines) override a session's
        # own CA (psf/requests#3829): the CA we were given would be silently ignored.
        session = requests.Session()
        session.trust_env = False
    return HttpExporter(
        endpoint=endpoint,
        certificate_file=str(options.ca) if options.ca else None,
        client_certificate_file=str(options.cert) if options.cert else None,
        client_key_file=str(options.key) if options.key else None,
        headers=headers,
        timeout=options.timeout_s,
        session=session,
    )


class PresetIds(IdGenerator):
    """Lets tailreplay choose a span's ids through the SDK's own span API.

    The ids of our spans are decided before the span exists — the ``traceparent``
    the replayer sent, the ids a capture recorded — and the SDK takes ids only
    from its id generator. ``preset`` arms the next span's ids; spans are
    created on one thread at a time per provider (the replay loop, the recorder,
    the exporter command), which a lock makes certain.
    """

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._trace_id = 0
        self._span_id = 0
        self.lock = threading.Lock()

    def preset(self, trace_id: bytes | None, span_id: bytes | None) -> None:
        self._trace_id = int.from_bytes(trace_id, "big") if trace_id else 0
        self._span_id = int.from_bytes(span_id, "big") if span_id else 0

    def generate_span_id(self) -> int:
        sid, self._span_id = self._span_id, 0
        return sid or self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        tid, self._trace_id = self._trace_id, 0
        return tid or self._random.generate_trace_id()


class SyncBatches(SpanProcessor):
    """Exports every ``size`` spans on the caller's thread, waiting for each batch.

    For ``traces export otlp``: an archive can hold millions of records, far more
    than a BatchSpanProcessor's queue, which would drop the excess; here the
    reader waits for the collector instead, and a failed batch is known at once.
    """

    def __init__(self, exporter: SpanExporter, size: int = 512) -> None:
        self.exporter = exporter
        self.size = size
        self._pending: list[ReadableSpan] = []
        self.failed = False

    def on_end(self, span: ReadableSpan) -> None:
        self._pending.append(span)
        if len(self._pending) >= self.size:
            self._export()

    def _export(self) -> None:
        batch, self._pending = self._pending, []
        if batch and self.exporter.export(batch) is not SpanExportResult.SUCCESS:
            self.failed = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._export()
        return True

    def shutdown(self) -> None:
        self._export()
        self.exporter.shutdown()


class _Reporting(SpanExporter):
    """Wraps the real exporter: counts spans delivered and failed, warns once."""

    def __init__(self, inner: SpanExporter, warn: Callable[[str], None], where: str) -> None:
        self.inner = inner
        self.warn = warn
        self.where = where
        self.exported = 0
        self.failed = 0
        self.closing = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.closing:  # past the flush deadline: do not wait on a dead collector
            self.failed += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter bug must not end the run
            result = SpanExportResult.FAILURE
            reason = f" ({exc})"
        else:
            reason = ""
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            if not self.failed:
                self.warn(
                    f"warning: OTLP export to {self.where} failed{reason}; "
                    "spans are being dropped (the run goes on)"
                )
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _resource(service: str, pairs: tuple[tuple[str, str], ...]) -> Resource:
    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; an explicit
    # --resource wins over both, and our service name fills in only when neither set one.
    env = Resource.create({})
    attributes: dict[str, Any] = {"service.version": __version__}
    if str(env.attributes.get("service.name", "unknown_service")).startswith("unknown_service"):
        attributes["service.name"] = service
    attributes.update(dict(pairs))
    return env.merge(Resource(attributes))


class Telemetry:
    """Our TracerProvider, its tracer and exporter, and how to close them in bounded time."""

    def __init__(
        self,
        provider: TracerProvider,
        ids: PresetIds,
        options: OtlpOptions,
        processor: SpanProcessor,
        exporter: _Reporting | None = None,
    ) -> None:
        self.provider = provider
        self.processor = processor
        self.ids = ids
        self.options = options
        self.exporter = exporter
        self.tracer: Tracer = provider.get_tracer("tailreplay", __version__)
        self.emitted = 0

    @classmethod
    def start(
        cls,
        options: OtlpOptions,
        *,
        service: str,
        warn: Callable[[str], None],
        batch: bool = True,
        max_queue_size: int = 65_536,
    ) -> Telemetry:
        """A provider exporting to the endpoint ``options`` describe.

        ``batch``: a BatchSpanProcessor (export on its own thread; live traffic);
        else ``SyncBatches`` (the caller waits; archives).
        """
        # The SDK logs each retry and each failed batch; we say it once, ourselves.
        logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
        logging.getLogger("opentelemetry.sdk.trace.export").setLevel(logging.ERROR)
        where = options.shown_endpoint()
        reporting = _Reporting(make_exporter(options), warn, where)
        processor: SpanProcessor = (
            BatchSpanProcessor(
                reporting,
                max_queue_size=max_queue_size,
                max_export_batch_size=512,
                schedule_delay_millis=1000,
            )
            if batch
            else SyncBatches(reporting)
        )
        ids = PresetIds()
        # Sampling is ours (--trace-sample keeps errors and the tail, which no SDK
        # sampler can know at span start): the SDK keeps every span we make.
        provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=_resource(service, options.resource),
            id_generator=ids,
            # ``close`` ends it, within its bound; the SDK's own shutdown at interpreter
            # exit would wait up to 30 s more for an export a hung collector holds.
            shutdown_on_exit=False,
        )
        provider.add_span_processor(processor)
        return cls(provider, ids, options, processor, reporting)

    @classmethod
    def for_processor(cls, processor: SpanProcessor, options: OtlpOptions) -> Telemetry:
        """A provider feeding ``processor`` directly (tests: an InMemorySpanExporter)."""
        ids = PresetIds()
        provider = TracerProvider(
            sampler=ALWAYS_ON, resource=_resource("tailreplay", options.resource), id_generator=ids
        )
        provider.add_span_processor(processor)
        return cls(provider, ids, options, processor)

    def close(self, flush_timeout_s: float = 5.0) -> tuple[int, int]:
        """Flush what is queued and shut down, returning within ``flush_timeout_s``
        whatever the collector does (refuses, never answers, stalls mid-answer).

        The SDK's flush takes no deadline (it exports on the caller's thread, each
        request bounded only by ``--otlp-timeout`` and its retries), so it runs on a
        thread of its own that is abandoned at the deadline: spans it had not seen
        delivered by then count as not delivered. Returns (spans exported, spans not
        delivered).
        """
        closing = threading.Thread(target=self._flush_and_shut, name="otlp-close", daemon=True)
        closing.start()
        closing.join(flush_timeout_s)
        if closing.is_alive() and self.exporter is not None:
            self.exporter.closing = True  # any later batch fails at once, uncounted as sent
            with contextlib.suppress(Exception):
                self.exporter.inner.shutdown()  # interrupts a retry back-off in progress
        if self.exporter is None:
            return self.emitted, 0
        exported = self.exporter.exported
        return exported, max(self.emitted - exported, self.exporter.failed)

    def _flush_and_shut(self) -> None:
        self.provider.force_flush()
        self.provider.shutdown()
