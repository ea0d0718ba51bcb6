"""The proxy's TLS listener: so it can stand where an HTTPS endpoint stood.

Modern settings only (Mozilla's "intermediate" profile): TLS 1.2 and 1.3, forward-
secret AEAD ciphers, no compression, no renegotiation. HTTP/1.1 is offered by
ALPN, which is what the OpenAI SDKs and curl speak.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from tailreplay.errors import UsageError

__all__ = ["server_context"]

_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"  # TLS 1.2; TLS 1.3's suites are all AEAD


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context for ``cert`` (PEM, with its chain) and ``key``; one line if unusable."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])
    try:
        context.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise UsageError(f"--tls-cert/--tls-key: {exc.filename}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        message = f"--tls-cert {cert} / --tls-key {key}: cannot use them ({reason})"
        raise UsageError(message) from None
    return context
