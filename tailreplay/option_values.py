"""How the values a user types are read, for the options of every command: factors
(``2x``, ``200%``), durations, sizes, HOST:PORT, URLs, K=V pairs, shards, headers,
bucket edges, a tail's cost, body edits, files to write.

Each is a ``Text`` (``tailreplay/declared.py``): a name for help and a parser called
as ``parse(text, flag)``, raising ``UsageError`` naming the flag. The command line
turns them into click types (``tailreplay/cli/options.py``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tailreplay.declared import Text
from tailreplay.errors import UsageError
from tailreplay.http.header_rules import header_problem, name_problem
from tailreplay.output_path import FolderPath
from tailreplay.units import (
    ascii_digits,
    parse_buckets,
    parse_duration,
    parse_factor,
    parse_host_port,
    parse_http_url,
    parse_size,
)

__all__ = [
    "BODY_DROP",
    "BODY_SET",
    "BUCKETS",
    "DURATION",
    "DURATION_ABOVE_0",
    "FACTOR",
    "FILE_OUT",
    "HEADER",
    "HEADER_NAME",
    "HOST_PORT",
    "HTTP_URL",
    "KEY_VALUE",
    "MAX_SHARDS",
    "MODEL_MAP",
    "NAME_PREFIX",
    "SHARD",
    "SIZE",
    "SIZE_ABOVE_0",
    "TAIL_COST",
]


def _pair(text: str, flag: str, *, value_required: bool) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or (value_required and not value):
        raise UsageError(f"invalid {flag} {text!r}: use KEY=VALUE")
    return key, value


MAX_SHARDS = 1 << 16
"""The most shards a run is cut into (``--shard i/N``, a result header's ``[i, N]``):
more than any deployment runs, and a report lists the missing ones."""


def _shard(text: str, flag: str) -> tuple[int, int]:
    i, sep, n = text.partition("/")
    digits = sep and ascii_digits(i) and ascii_digits(n)
    if not digits or not int(i) < int(n) <= MAX_SHARDS:
        raise UsageError(
            f"invalid {flag} {text!r}: use i/N with 0 <= i < N <= {MAX_SHARDS:,}, e.g. 0/4"
        )
    return int(i), int(n)


def _header(text: str, flag: str) -> tuple[str, str]:
    """``Name: value``, by the rule of ``tailreplay/http/header_rules.py``."""
    name, sep, value = (part.strip() for part in text.partition(":"))
    # The text is not echoed: without its colon, a credential's value may be all of it.
    if not sep:
        raise UsageError(f"invalid {flag}: use 'Name: value' (no ':' found)")
    if (problem := header_problem(name, value)) is not None:
        raise UsageError(f"invalid {flag}: {problem}")
    return name, value


def _header_name(text: str, flag: str) -> str:
    """A header's name alone (``--redact-header x-my-key``)."""
    if (problem := name_problem(text)) is not None:
        raise UsageError(f"invalid {flag}: {problem}")  # the text is not echoed
    return text


def _tail_cost(text: str, flag: str) -> tuple[float, float]:
    """``input=MS,output=MS``: milliseconds per input and per output token."""
    costs: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = (p.strip() for p in part.partition("="))
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or key not in ("input", "output") or not math.isfinite(number) or number < 0:
            break
        costs[key] = number
    else:
        if costs.keys() == {"input", "output"} and any(costs.values()):
            return costs["input"], costs["output"]
    raise UsageError(
        f"invalid {flag} {text!r}: use input=MS,output=MS (ms per token, >= 0, "
        "not both 0), e.g. input=0.05,output=8"
    )


def _body_set(text: str, flag: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise UsageError(f"invalid {flag} {text!r}: use KEY=VALUE, e.g. temperature=0")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value  # a bare word is a string: --body-set user=replay


def _body_drop(key: str, flag: str) -> str:
    if not key or any(not part for part in key.split(".")):
        raise UsageError(f"invalid {flag} {key!r}: give a key, e.g. tools")
    return key


def _file_out(text: str, flag: str) -> Path:
    """A file to write; a name ending in '/' is a folder (``FolderPath``), which
    ``check_output_file`` refuses with its reason, where a plain ``Path`` would have
    named a file without the '/'. Not checked against the disk here: ``deploy`` parses
    a job's arguments on another machine."""
    return FolderPath(text) if text.endswith("/") and text != "/" else Path(text)


def _above_zero(parse: Callable[[str], float], what: str) -> Callable[[str, str], Any]:
    """``parse``, refusing 0 (a timeout of none would fail every request; a size of
    none would refuse every body)."""

    def parsed(text: str, flag: str) -> Any:
        value = parse(text)
        if value <= 0:
            raise UsageError(f"invalid {flag} {text!r}: give a {what} above 0")
        return value

    return parsed


def _name_prefix(text: str, flag: str) -> str:
    """The start of a file name: no folder in it (``../x`` would write outside the
    output folder), nothing a name cannot hold."""
    if not text or "/" in text or "\\" in text or not text.isprintable():
        raise UsageError(
            f"invalid {flag} {text!r}: give the start of a file name (no '/', no control "
            "characters), e.g. capture"
        )
    return text


FILE_OUT = Text("file", _file_out)
FACTOR = Text("factor", parse_factor)
DURATION = Text("duration", lambda text, flag: parse_duration(text))
SIZE = Text("size", lambda text, flag: parse_size(text))
DURATION_ABOVE_0 = Text("duration", _above_zero(parse_duration, "duration"))
SIZE_ABOVE_0 = Text("size", _above_zero(parse_size, "size"))
NAME_PREFIX = Text("name", _name_prefix)
HOST_PORT = Text("host:port", parse_host_port)
HTTP_URL = Text("url", parse_http_url)
KEY_VALUE = Text("key=value", functools.partial(_pair, value_required=False))
MODEL_MAP = Text("a=b", functools.partial(_pair, value_required=True))
SHARD = Text("i/n", _shard)
HEADER = Text("name: value", _header)
HEADER_NAME = Text("name", _header_name)
BUCKETS = Text("edges", lambda text, flag: parse_buckets(text))
TAIL_COST = Text("input=ms,output=ms", _tail_cost)
BODY_SET = Text("key=value", _body_set)
BODY_DROP = Text("key", _body_drop)
