"""Hostile inputs for the importers: real files and fixtures, mutated.

``hostile_inputs(fmt)`` draws a seed of that format (the first rows of the public
Azure traces in ``tests/data``, the two real HAR captures, written fixtures for
the formats without a public copy here) and mutates it: for JSON formats, one value
anywhere in the tree replaced by one of the wrong type or range; then up to three
byte-level changes — truncation, garbage and NUL bytes, a byte order mark, CRLF
or bare CR line ends, a huge field, a huge line, deep nesting, numbers replaced by
NaN, Infinity or values past 64 bits, stray quotes, an empty or blank file.
``test_import_fuzz.py`` runs every importer on them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.helpers import DATA

__all__ = ["FORMATS", "hostile_inputs", "seeds"]

FORMATS = ("azure", "burstgpt", "har", "mooncake", "otlp-json")
JSON_FORMATS = frozenset({"har", "mooncake", "otlp-json"})
HUGE_FIELD = 200_000  # over the csv module's field limit (128 KiB)


def _head(path: Path, lines: int) -> bytes:
    with open(path, "rb") as f:
        return b"".join(f.readline() for _ in range(lines))


def _otlp_doc(i: int) -> dict[str, Any]:
    def attr(key: str, value: Any) -> dict[str, Any]:
        kind = "intValue" if isinstance(value, int) else "stringValue"
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}

    span = {
        "traceId": f"{i + 1:032x}",
        "spanId": f"{i + 1:016x}",
        "parentSpanId": "",
        "name": "chat llama",
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + i * 10**9),
        "endTimeUnixNano": str(1_700_000_001_500_000_000 + i * 10**9),
        "attributes": [
            attr("gen_ai.operation.name", "chat"),
            attr("gen_ai.request.model", "llama"),
            attr("gen_ai.usage.input_tokens", 120 + i),
            attr("gen_ai.usage.output_tokens", 30),
            attr("http.response.status_code", 200),
            {
                "key": "gen_ai.response.finish_reasons",
                "value": {"arrayValue": {"values": [{"stringValue": "stop"}]}},
            },
        ],
    }
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]}


def seeds(fmt: str) -> list[bytes]:
    """Well-formed inputs of ``fmt``, each importing cleanly."""
    if fmt == "azure":
        return [
            _head(DATA / "azure_llm_2023" / f"AzureLLMInferenceTrace_{name}.csv", 60)
            for name in ("code", "conv")
        ]
    if fmt == "har":
        return [p.read_bytes() for p in sorted((DATA / "har_pagexray").glob("*.har"))]
    if fmt == "burstgpt":
        rows = [
            f"{i * 1.5:g},{'ChatGPT' if i % 3 else 'GPT-4'},{100 + i},{i % 7 * 20},"
            f"{100 + i + i % 7 * 20},Conversation log"
            for i in range(40)
        ]
        head = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
        return ["\n".join([head, *rows]).encode() + b"\n"]
    if fmt == "mooncake":
        rows = [
            {
                "timestamp": i * 27,
                "input_length": 512 + i,
                "output_length": 3 + i,
                "hash_ids": [0, i + 1],
                **({"session_id": i % 4} if i % 2 else {}),
            }
            for i in range(40)
        ]
        return ["".join(json.dumps(r) + "\n" for r in rows).encode()]
    if fmt == "otlp-json":
        docs = [_otlp_doc(i) for i in range(6)]
        one_a_line = "".join(json.dumps(d) + "\n" for d in docs).encode()
        merged = {"resourceSpans": [rs for d in docs for rs in d["resourceSpans"]]}
        return [one_a_line, json.dumps(merged, indent=2).encode()]
    raise ValueError(fmt)


# ---- values of the wrong type or range ---------------------------------------------

_HOSTILE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([-1, 0, 2**63, 2**64 + 1, -(2**70), 10**30]),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, -0.0, 1e-310]),
    st.text(max_size=12),
    st.sampled_from(["", "x" * HUGE_FIELD, "\x1b[2J\r", "\ud800", "2016-13-45T99:99:99Z"]),
    st.just([]),
    st.just({}),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:8]):  # the first few of long lists: enough to reach every kind
            out += _paths(v, (*at, i))
    return out


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node[path[0]] = _replace(node[path[0]], path[1:], value)
    return node


def _mutate_json(draw: Any, text: str) -> str:
    """One value of one document replaced (a line's document, in one-a-line files)."""
    lines = text.splitlines(keepends=True)
    multi = len(lines) > 1 and lines[0].strip().startswith("{") and lines[0].strip().endswith("}")
    if multi:
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = _mutate_json(draw, lines[i]) + "\n"
        return "".join(lines)
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    path = draw(st.sampled_from(_paths(doc)))
    return json.dumps(_replace(doc, path, draw(_HOSTILE_VALUES)))


# ---- byte-level changes ------------------------------------------------------------

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?")
_Mutation = Callable[[Any, bytes], bytes]


def _at(draw: Any, data: bytes) -> int:
    return int(draw(st.integers(0, len(data))))


def _truncate(draw: Any, data: bytes) -> bytes:
    return data[: _at(draw, data)]


def _garbage(draw: Any, data: bytes) -> bytes:
    at = _at(draw, data)
    return data[:at] + draw(st.binary(min_size=1, max_size=16)) + data[at:]


def _nul(draw: Any, data: bytes) -> bytes:
    at = _at(draw, data)
    return data[:at] + b"\0" + data[at:]


def _bom(draw: Any, data: bytes) -> bytes:
    return b"\xef\xbb\xbf" + data


def _line_ends(draw: Any, data: bytes) -> bytes:
    ending = draw(st.sampled_from([b"\r\n", b"\r", b"\n\n", b"\n \n"]))
    return data.replace(b"\r\n", b"\n").replace(b"\n", ending)


def _huge_field(draw: Any, data: bytes) -> bytes:
    at = _at(draw, data)
    quote = draw(st.sampled_from([b"", b'"']))
    return data[:at] + quote + b"x" * HUGE_FIELD + quote + data[at:]


def _huge_line(draw: Any, data: bytes) -> bytes:
    """Past the line bound (which the fuzz test lowers to 64 KiB to keep this cheap)."""
    at = _at(draw, data)
    return data[:at] + b"7" * (70 << 10) + data[at:]


def _deep(draw: Any, data: bytes) -> bytes:
    at = _at(draw, data)
    depth = draw(st.sampled_from([100, 5_000, 100_000]))
    return data[:at] + b"[" * depth + b"]" * depth + data[at:]


def _number(draw: Any, data: bytes) -> bytes:
    found = list(_NUMBER.finditer(data))
    if not found:
        return data
    m = draw(st.sampled_from(found[:200]))
    new = draw(
        st.sampled_from(
            [
                b"NaN",
                b"Infinity",
                b"-Infinity",
                b"1e400",
                b"-1",
                b"99999999999999999999999",
                b"1" * 5000,
                b"0x1F",
                b"",
            ]
        )
    )
    return data[: m.start()] + new + data[m.end() :]


def _quote(draw: Any, data: bytes) -> bytes:
    at = _at(draw, data)
    return data[:at] + b'"' + data[at:]


def _repeat(draw: Any, data: bytes) -> bytes:
    """A line repeated: ties and duplicate ids."""
    lines = data.splitlines(keepends=True)
    if len(lines) < 2:
        return data
    i = draw(st.integers(1, len(lines) - 1))
    return b"".join(lines[: i + 1] + [lines[i]] * draw(st.integers(1, 50)) + lines[i + 1 :])


def _blank(draw: Any, data: bytes) -> bytes:
    return draw(st.sampled_from([b"", b"\n", b" \r\n\t", b"\xef\xbb\xbf"]))


MUTATIONS: tuple[_Mutation, ...] = (
    _truncate,
    _garbage,
    _nul,
    _bom,
    _line_ends,
    _huge_field,
    _huge_line,
    _deep,
    _number,
    _number,
    _quote,
    _repeat,
    _blank,
)


@st.composite
def hostile_inputs(draw: Any, fmt: str) -> bytes:
    """A seed of ``fmt``, mutated (``__doc__``)."""
    data: bytes = draw(st.sampled_from(seeds(fmt)))
    if fmt in JSON_FORMATS and draw(st.booleans()):
        data = _mutate_json(draw, data.decode()).encode("utf-8", "surrogatepass")
    for mutation in draw(st.lists(st.sampled_from(MUTATIONS), max_size=3)):
        data = mutation(draw, data)
    return data
