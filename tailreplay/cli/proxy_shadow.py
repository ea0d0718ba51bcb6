"""``proxy --shadow``: its options' checks (declared in ``proxy/settings.py``), and the
guard that keeps the copies off production itself."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource
from yarl import URL

from tailreplay.errors import UsageError
from tailreplay.http.same_host import same_deployment
from tailreplay.traces.text.redact_targets import redact_url
from tailreplay.units import host_port

if TYPE_CHECKING:  # imported when a shadow is configured: every command loads this module
    from tailreplay.proxy.settings import ShadowOptions
    from tailreplay.proxy.shadow import ShadowConfig

__all__ = ["base_url", "refuse_without_shadow", "shadow_config"]


def refuse_without_shadow(ctx: click.Context) -> None:
    """A ``--shadow-*`` option given without ``--shadow`` is refused, at its default
    value too: the user meant a shadow that is not there."""
    if ctx.params.get("shadow_url") is not None:
        return
    for param in ctx.command.params:
        name = param.name or ""
        source = ctx.get_parameter_source(name)
        if name.startswith("shadow_") and source not in (None, ParameterSource.DEFAULT):
            flag = param.opts[0] if param.opts else name
            raise UsageError(
                f"{flag} shapes the copies sent to --shadow, which is not given: give --shadow URL"
            )


def base_url(flag: str, url: URL) -> URL:
    """``url`` as a base a request's path is appended to: one with a query or a fragment
    would put the path after them (``/?key=…/v1/chat/completions``), so it is refused."""
    if url.raw_query_string or url.raw_fragment:
        raise UsageError(
            f"{flag} {redact_url(str(url))}: a base URL takes no query or fragment (each "
            "request's own path and query are appended to it)"
        )
    return url


def shadow_config(
    options: ShadowOptions,
    *,
    secret_names: frozenset[str],
    production: Iterable[URL],
    listen: tuple[str, int],
) -> ShadowConfig | None:
    """The shadow's configuration; a shadow that reaches one of ``production``'s
    upstreams or the proxy's own listener is refused (copies would double production's
    load, or loop through the proxy)."""
    url = options.shadow_url
    if url is None:
        return None
    from tailreplay.proxy.shadow import ShadowConfig

    base_url("--shadow", url)
    own = [str(u) for u in production]
    host, port = listen
    if port:
        own.append(f"http://{host_port(host, port)}")
    if (same := same_deployment(str(url), own)) is not None:
        raise UsageError(
            f"--shadow {redact_url(str(url))}: reaches {redact_url(same)}, which is "
            "production (an upstream or this proxy): a shadow is another deployment"
        )
    return ShadowConfig(
        url=url,
        share=options.shadow_share,
        headers=options.shadow_header,
        model_map=options.shadow_model_map,
        forward_auth=options.shadow_forward_auth,
        max_inflight=options.shadow_max_inflight,
        max_time_s=options.shadow_max_time,
        secret_names=secret_names,
    )
