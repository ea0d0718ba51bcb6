"""The guard that keeps a replay off production: a target that is the deployment an
archive was captured from is refused (``--allow-upstream`` to mean it). Two URLs are
one deployment as ``tailreplay.http.same_host`` judges it; the upstreams are every one an
archive names: its header's ``upstream`` and the proxy's path routes
(``capture.routes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailreplay.http.same_host import same_deployment
from tailreplay.traces.archive.capture_header import CaptureHeader

__all__ = ["archive_upstreams", "same_deployment"]


def archive_upstreams(header: Mapping[str, Any]) -> list[str]:
    """The upstream URLs an archive's header names: the capture's, and its routes'."""
    out = []
    if isinstance(header.get("upstream"), str):
        out.append(header["upstream"])
    capture = CaptureHeader.read(header)
    if capture is not None and capture.routes is not None:
        out += capture.routes.values()
    return out
