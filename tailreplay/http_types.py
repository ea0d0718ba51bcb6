"""The types the HTTP/1.1 client's pool (``http_client``) and its connections
(``http_connection``) share: where a request goes, what failing to talk to it
raises, and what takes a body as it arrives. Here so that the pool imports the
connection and nothing imports back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeAlias

__all__ = ["BodyConsumer", "Origin", "StaleConnection", "UpstreamError", "timeout_error"]

BodyConsumer: TypeAlias = Callable[[bytes], bool]
"""Takes body bytes as they arrive; returns False to stop reading until resumed."""


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


class UpstreamError(Exception):
    """Talking to the upstream failed; ``kind`` is the record's error name.

    ``message`` is for the client and never names the upstream (its address is the
    operator's business); ``detail`` is for the proxy's log.
    """

    def __init__(self, kind: str, message: str, status: int = 502, detail: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.detail = detail


def timeout_error() -> UpstreamError:
    """The error of an exchange past the pool's timeout (connect or answer)."""
    return UpstreamError("upstream_timeout", "the upstream did not answer in time", 504)


class StaleConnection(Exception):
    """A reused connection was closed before any answer: safe to send again. The
    connection fails its response with it; the pool catches it and never lets it out."""
