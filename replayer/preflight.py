"""Failing fast on a wrong target: a probe before the schedule starts, and a guard after;
and refusing the one target a replay must not reach, production.

A replay of a busy recording runs for minutes; a target that is down, a server
answering HTML 404s, or a wrong path must not cost that long to find out. Before
t0 one probe — in the first scheduled request's route, model and stream, with a
16-token prompt of its own (so the target's prefix cache holds nothing a
recorded request could reuse), asking for one output token — must get an API
answer; while the replay runs, the first ``FailFast.first`` results
all failing the same way stop it. Both end the run with one line naming the
cause (``NotMeasured``, exit 5).

A target that is the deployment an archive was captured from is refused
(``--allow-upstream`` to mean it). Two URLs are one deployment as
``tailreplay.http.same_host`` judges it; the upstreams are every one an archive names
(``archive_upstreams``): its header's ``upstream`` and the proxy's path routes
(``capture.routes``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from tailreplay.errors import NotMeasured
from tailreplay.http.header_rules import PROBE_HEADER
from tailreplay.http.same_host import same_deployment
from tailreplay.replayer.request import RequestBuilder
from tailreplay.replayer.results import target_message
from tailreplay.replayer.schedule import Planned
from tailreplay.replayer.transport import Outcome, Transport
from tailreplay.tracecontext import new_span_id, new_trace_id
from tailreplay.traces.archive.capture_header import CaptureHeader
from tailreplay.traces.archive.record import Record

__all__ = ["PROBE_HEADER", "FailFast", "archive_upstreams", "probe", "same_deployment"]

_API_TYPES = ("application/json", "text/event-stream")
_PLAIN_HTTP = ("WRONG_VERSION_NUMBER", "wrong version number", "record layer failure")
"""What OpenSSL says when a TLS client hello is answered in plain HTTP."""


async def probe(
    transport: Transport, builder: RequestBuilder, first: Planned, headers: dict[str, str]
) -> str:
    """Send the first request (one output token) and judge the answer; returns a line
    saying what was requested and how it went, or raises ``NotMeasured`` with the cause."""
    spec = builder.build(dataclasses.replace(first, budget=1, tail=False), probe=True)
    url = transport.url(spec.path)
    # A trace of its own, and a name, so the target's logs and traces can tell it apart.
    traceparent = f"00-{new_trace_id().hex()}-{new_span_id().hex()}-01"
    t0 = time.monotonic()
    out = await transport.send(spec, {**headers, PROBE_HEADER: "1"}, traceparent)
    took = f"{(time.monotonic() - t0) * 1e3:.0f} ms"
    problem = _judge(out, f"{spec.method} {url}")
    if problem is not None:
        raise NotMeasured(f"preflight: {problem} (skip this check with --no-preflight)")
    said = target_message(out.error_text) if out.status >= 400 else None
    return f"preflight: {spec.method} {url} answered {out.status} in {took}" + (
        f": {said}" if said else ""
    )


def _judge(out: Outcome, request: str) -> str | None:
    """Why the probe's answer means the replay cannot measure the target, or None."""
    if out.error == "connect" and any(sign in out.error_text for sign in _PLAIN_HTTP):
        return (
            f"cannot connect for {request}: the TLS handshake got something else "
            f"({out.error_text.removeprefix('cannot connect to the upstream: ')}); "
            "does the target speak plain HTTP? try --target http://"
        )
    if out.error == "connect":
        return f"cannot connect for {request}: nothing listens there, or it refused"
    if out.error == "timeout":
        return f"no answer to {request} within --timeout"
    if out.status == 0:
        return f"{request} failed: {out.error}"
    if out.status == 404:
        return f"{request} is 404 Not Found: is --target the API's base URL?"
    if 300 <= out.status < 400:  # never followed (to another host, perhaps)
        return f"{request} is redirected ({out.status}): is --target the API's base URL?"
    if out.status in (401, 403):
        return (
            f"{request} is refused with {out.status}: "
            "pass credentials with --header 'Authorization: Bearer ...'"
        )
    if not out.content_type.startswith(_API_TYPES):
        kind = out.content_type or "no content type"
        return f"{request} answered {out.status} with {kind}, not an API response"
    if out.status >= 500:
        return f"{request} answered {out.status}: {out.error_text[:200].strip()}"
    return None  # 2xx, or an API's own 4xx about the probe's request: the API is there


MEASURED = frozenset({"http_429", "http_503"})
"""Answers of a target at its limit: measured, never a reason to stop."""


class FailFast:
    """Stops a replay whose first ``first`` results all failed the same way (but for
    ``MEASURED`` answers)."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.seen = 0
        self.errors: set[str] = set()
        self.reason: str | None = None
        """Set once the replay should stop: what every one of them met."""

    def observe(self, record: Record) -> bool:
        """Count a result; True when the replay should stop now."""
        if self.first <= 0 or self.seen >= self.first or self.reason is not None:
            return False
        if record.error == "cancelled":
            return False  # cut by the replayer itself (Ctrl-C, --slo-stop): no answer
        self.seen += 1
        # An overloaded target's 429 or 503 is what a replay measures, not a wrong target.
        self.errors.add("ok" if record.error in MEASURED else (record.error or "ok"))
        if self.seen == self.first and len(self.errors) == 1 and "ok" not in self.errors:
            self.reason = (
                f"the first {self.first} requests all failed with {record.error}"
                f"{f' ({record.error_message})' if record.error_message else ''}; stopped "
                "(--fail-fast 0 replays on regardless)"
            )
            return True
        return False


def archive_upstreams(header: Mapping[str, Any]) -> list[str]:
    """The upstream URLs an archive's header names: the capture's, and its routes'."""
    out = []
    if isinstance(header.get("upstream"), str):
        out.append(header["upstream"])
    capture = CaptureHeader.read(header)
    if capture is not None and capture.routes is not None:
        out += capture.routes.values()
    return out
