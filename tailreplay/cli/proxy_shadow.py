"""``proxy --shadow``: the options that copy a share of production to a second target
(``proxy/shadow.py``), and the guard that keeps the copies off production itself."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

import click
from click.core import ParameterSource
from yarl import URL

from tailreplay.cli.options import DURATION, HEADER, HTTP_URL, MODEL_MAP, Parsed
from tailreplay.errors import UsageError
from tailreplay.http.same_host import same_deployment
from tailreplay.sampling import share_threshold
from tailreplay.traces.text.redact_targets import redact_url
from tailreplay.units import host_port

if TYPE_CHECKING:  # imported when a shadow is configured: every command loads this module
    from tailreplay.proxy.shadow import ShadowConfig

__all__ = ["base_url", "refuse_without_shadow", "shadow_config", "shadow_options"]

F = TypeVar("F", bound=Callable[..., object])


def _share(text: str, flag: str) -> float:
    """A share in percent (``10%``), over 0% and at most 100%. A bare number is refused:
    ``1`` could mean 1% or all of production's traffic."""
    stripped = text.strip()
    if not stripped.endswith("%"):
        raise ValueError(
            f"{flag} {text}: give the share in percent, e.g. 10% (a bare number is "
            "ambiguous: 1 could be 1% or 100%)"
        )
    try:
        value = float(stripped.removesuffix("%")) / 100
    except ValueError:
        raise ValueError(f"{flag} {text}: give the share in percent, e.g. 10%") from None
    if not 0 < value <= 1:
        raise ValueError(f"{flag} {text}: a share is over 0% and at most 100% (e.g. 10%)")
    if share_threshold(value) == 0:
        raise ValueError(f"{flag} {text}: too small a share to pick any trace id")
    return value


SHARE = Parsed("share", _share)


def shadow_options(f: F) -> F:
    """``--shadow`` and the options that shape its copies."""
    options = [
        click.option(
            "--shadow",
            "shadow_url",
            type=HTTP_URL,
            help="Copy a share of generating requests to this target too, off the request "
            "path; its answers are recorded beside production's (docs/shadow.md).",
        ),
        click.option(
            "--shadow-share",
            type=SHARE,
            default="10%",
            show_default=True,
            help="Share of generating requests copied, by trace id (a session's go together).",
        ),
        click.option(
            "--shadow-header",
            type=HEADER,
            multiple=True,
            help="'Name: value' sent with every copy (repeatable), e.g. the shadow's own "
            "Authorization.",
        ),
        click.option(
            "--shadow-model-map",
            type=MODEL_MAP,
            multiple=True,
            help="A=B: a copy of a request for model A asks the shadow for B (repeatable).",
        ),
        click.option(
            "--shadow-forward-auth",
            is_flag=True,
            help="Send the client's own credentials to the shadow: by default every header "
            "and query parameter the recorder redacts as a credential (Authorization, "
            "api-key, X-Goog-Api-Key, ?key=, --redact-header ...), Cookie and the OpenAI "
            "account headers stay behind.",
        ),
        click.option(
            "--shadow-max-inflight",
            type=click.IntRange(min=1),
            default=64,
            show_default=True,
            help="Copies in flight at once; more are dropped and counted.",
        ),
        click.option(
            "--shadow-max-time",
            type=DURATION,
            default="300s",
            show_default=True,
            help="A copy's whole exchange with the shadow (under --timeout when shorter); "
            "past it the copy is cut and counted.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


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
    url: URL | None,
    *,
    share: float,
    headers: Iterable[tuple[str, str]],
    model_map: Iterable[tuple[str, str]],
    forward_auth: bool,
    max_inflight: int,
    max_time_s: float,
    secret_names: frozenset[str],
    production: Iterable[URL],
    listen: tuple[str, int],
) -> ShadowConfig | None:
    """The shadow's configuration; a shadow that reaches one of ``production``'s
    upstreams or the proxy's own listener is refused (copies would double production's
    load, or loop through the proxy)."""
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
        share=share,
        headers=tuple(headers),
        model_map=tuple(model_map),
        forward_auth=forward_auth,
        max_inflight=max_inflight,
        max_time_s=max_time_s,
        secret_names=secret_names,
    )
