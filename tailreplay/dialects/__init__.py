"""The API dialects tailreplay reads, in one registry every stage asks.

A dialect is one module here holding one ``Dialect`` subclass (``base.py`` says what
it states); adding one is that module, a line in ``DIALECTS`` and its tests
(docs/architecture.md). A request path no dialect serves is *unknown*: forwarded
byte-exact, recorded with its path, status and timing, never guessed at.

>>> dialect_for("/v1/messages?beta=true").name
'messages'
"""

from __future__ import annotations

from tailreplay.dialects.base import Dialect
from tailreplay.dialects.chat import Chat
from tailreplay.dialects.completions import Completions
from tailreplay.dialects.embeddings import Embeddings
from tailreplay.dialects.messages import Messages
from tailreplay.dialects.responses import Responses

__all__ = [
    "DEFAULT_ROUTE",
    "DIALECTS",
    "ROUTES",
    "Dialect",
    "dialect_for",
    "dialect_named",
    "operation_name",
    "route_for_operation",
    "route_label",
]

DIALECTS: tuple[Dialect, ...] = (Chat(), Completions(), Responses(), Embeddings(), Messages())
"""Every dialect, in the order the docs and tables list them."""

_BY_ROUTE = {route: d for d in DIALECTS for route in d.routes}

DEFAULT_ROUTE = DIALECTS[0].routes[0]
"""Where a request goes when its source names no route (token-count traces): chat's."""

ROUTES = (*sorted(_BY_ROUTE), "/v1/models", "other")
"""Every value ``route_label`` can return: the bounded ``route`` label of metrics."""


def _bare(path: str | None) -> str:
    return (path or "").split("?", 1)[0].rstrip("/")


def dialect_for(path: str | None) -> Dialect | None:
    """The dialect serving a request path (its query ignored), or None: unknown."""
    # A route as it is (the usual case) needs no cutting: routes hold no query or end "/".
    found = _BY_ROUTE.get(path) if path is not None else None
    return found if found is not None else _BY_ROUTE.get(_bare(path))


_BY_NAME = {d.name: d for d in DIALECTS}


def dialect_named(name: str) -> Dialect:
    """The dialect of a name (``chat``, ``messages``, ...); KeyError if none."""
    return _BY_NAME[name]


def route_label(path: str | None) -> str:
    """A bounded label for metrics and per-route tables: a known route, or "other"."""
    bare = _bare(path)
    return bare if bare in _BY_ROUTE or bare == "/v1/models" else "other"


def operation_name(path: str | None) -> str | None:
    """GenAI's ``gen_ai.operation.name`` for a request path; None for a route no dialect
    serves, which is no GenAI operation."""
    dialect = dialect_for(path)
    return dialect.operation if dialect is not None else None


def route_for_operation(operation: str | None) -> str:
    """The route of the first dialect doing a GenAI operation (``gen_ai.operation.name``:
    ``text_completion`` is completions', ``embeddings`` embeddings'); chat's otherwise."""
    found = next((d for d in DIALECTS if d.operation == operation), DIALECTS[0])
    return found.routes[0]
