"""Where a request goes: the configured upstream (or route) for its path, and the
request target sent there.

Only configured upstreams are ever contacted: the target URL is built by appending
the request's path to the configured base and checked again before sending, so
absolute-form targets, ``//host`` paths and Host headers cannot steer a request
elsewhere; and a path whose dot-segments lead out of the base path, or to another
route's upstream, is refused (``proxy/dot_segments.py``).
"""

from __future__ import annotations

from yarl import URL

from tailreplay.http.client import Origin
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.dot_segments import resolutions

__all__ = ["OutsideBase", "Targets"]


class OutsideBase(Exception):
    """A request's path resolves outside its upstream's base path."""


class Targets:
    """The upstream origin and request target of each path, cached.

    A few paths carry nearly all traffic: building and checking their URL once saves
    a URL parse (and the dot-segments' check) per request. Bounded, since paths come
    from clients.
    """

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.allowed = config.allowed_origins()
        self._targets: dict[str, tuple[Origin, str]] = {}

    def __call__(self, raw_path: str) -> tuple[Origin, str] | None:
        """The origin and target for ``raw_path`` (path and query), or None if no
        configured upstream serves it; raises ``OutsideBase`` for a path whose
        dot-segments leave the base path."""
        if (target := self._targets.get(raw_path)) is not None:
            return target
        config = self.config
        base = config.upstream_for(raw_path)
        # A fragment is never part of a request target, and the URL below drops it:
        # the path is checked as it will be sent ("/..#x" goes out as "/..").
        sent = raw_path.partition("#")[0]
        resolved = resolutions(sent.partition("?")[0])
        if resolved is None or any(config.upstream_for(p) != base for p in resolved):
            raise OutsideBase
        # String concatenation, never URL joining: "//evil.example/x" must stay a path.
        url = URL(str(base).rstrip("/") + raw_path, encoded=True)
        if (url.scheme, url.host, url.port) not in self.allowed or url.host is None:
            return None
        assert url.port is not None  # http and https have default ports
        target = (Origin(url.scheme, url.host, url.port), url.raw_path_qs)
        if len(self._targets) >= 4096:
            self._targets.clear()
        self._targets[raw_path] = target
        return target
