"""OTLP/JSON trace files (what Tempo exports; one ``{"resourceSpans": ...}`` object a
line, or one whole document, pretty-printed or not): spans that carry GenAI
attributes or an HTTP route become records.

Which of the two a file is, its first lines say: if one of the first few parses on
its own as an object with ``resourceSpans``, the file is one document a line (a
damaged line is skipped, the rest read); otherwise it is one document, read whole.
A malformed span is skipped as ``span N`` of its document, the others kept.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from tailreplay.dialects import route_for_operation
from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport, Place
from tailreplay.traces.importers.text_input import json_document, lines

__all__ = ["read"]

_PROBE_LINES = 8
"""Lines tried for a document of their own before the file is taken as one document."""


def _list(obj: Any, key: str) -> list[Any]:
    """``obj[key]`` as a list: [] when absent; ValueError when not a list, or ``obj``
    not an object."""
    if type(obj) is not dict:
        raise ValueError(f"a JSON {type(obj).__name__} where an object with {key!r} belongs")
    value = obj.get(key)
    if value is None:
        return []
    if type(value) is not list:
        raise ValueError(f"{key!r} must be a list")
    return value


def _value(v: Any) -> Any:
    if type(v) is not dict:
        return None
    for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if kind in v:
            return int(v[kind]) if kind == "intValue" else v[kind]
    if "arrayValue" in v:
        return [_value(x) for x in _list(v["arrayValue"], "values")]
    return None


def _id(text: Any, size: int) -> bytes | None:
    if not text or type(text) is not str:
        return None
    raw = bytes.fromhex(text) if len(text) == 2 * size else None
    return raw if raw and any(raw) else None


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for a in _list(span, "attributes"):
        if type(a) is not dict or type(a.get("key")) is not str:
            raise ValueError("every attribute must be an object with a string key")
        out[a["key"]] = _value(a.get("value"))
    return out


def _span(span: Any) -> Record | None:
    if type(span) is not dict:
        raise ValueError(f"a JSON {type(span).__name__}, not an object")
    attrs = _attributes(span)
    genai = any(k.startswith("gen_ai.") for k in attrs)
    route = attrs.get("http.route") or attrs.get("url.path")
    if not genai and not route:
        return None
    start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
    finish = attrs.get("gen_ai.response.finish_reasons")
    path = route or route_for_operation(attrs.get("gen_ai.operation.name"))
    status = attrs.get("http.response.status_code")
    error = attrs.get("error.type")
    return Record(
        start_ns=start,
        duration_ns=max(end - start, 0),
        trace_id=_id(span.get("traceId"), 16),
        span_id=_id(span.get("spanId"), 8),
        parent_span_id=_id(span.get("parentSpanId"), 8),
        method=attrs.get("http.request.method") or ("POST" if genai else None),
        path=path if isinstance(path, str) else None,
        status=int(status) if isinstance(status, int | str) and str(status).isdigit() else None,
        model=attrs.get("gen_ai.request.model"),
        max_tokens=attrs.get("gen_ai.request.max_tokens"),
        input_tokens=attrs.get("gen_ai.usage.input_tokens"),
        output_tokens=attrs.get("gen_ai.usage.output_tokens"),
        tokens_source="usage" if attrs.get("gen_ai.usage.output_tokens") is not None else None,
        finish_reason=finish[0] if isinstance(finish, list) and finish else None,
        error=str(error) if error else None,
    )


def _is_document(text: str) -> bool:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return type(doc) is dict and "resourceSpans" in doc


def _one_a_line(f: BinaryIO) -> bool:
    """Whether the file holds one document a line (read from, and left at, its start)."""
    probe = ImportReport("")  # what the probe meets is reported when the lines are read
    first = itertools.islice((t for _, t in lines(f, probe) if t.strip()), _PROBE_LINES)
    found = any(_is_document(text) for text in first)
    f.seek(0)
    return found


def _documents(path: Path, report: ImportReport) -> Iterator[tuple[int, Any]]:
    with open(path, "rb") as f:
        if not _one_a_line(f):
            yield 1, json_document(path, "OTLP/JSON")
            return
        for line, text in lines(f, report):
            if not text.strip():
                continue
            try:
                yield line, json.loads(text)
            except (ValueError, RecursionError) as exc:
                report.bad(line, f"not OTLP/JSON: {exc}")


def _items(obj: Any, key: str, line: int, report: ImportReport) -> list[Any]:
    try:
        return _list(obj, key)
    except ValueError as exc:
        report.bad(line, f"malformed span data: {exc}")
        return []


def _spans(doc: Any, line: int, report: ImportReport) -> Iterator[Any]:
    """The spans of one document; a container of the wrong shape is reported and
    skipped, the spans beside it kept."""
    if type(doc) is not dict or "resourceSpans" not in doc:
        report.bad(line, "not OTLP/JSON: no resourceSpans object")
        return
    for rs in _items(doc, "resourceSpans", line, report):
        for ss in _items(rs, "scopeSpans", line, report):
            yield from _items(ss, "spans", line, report)


def read(path: Path, report: ImportReport) -> Iterator[tuple[Place, Record]]:
    for line, doc in _documents(path, report):
        for n, span in enumerate(_spans(doc, line, report), start=1):
            try:
                record = _span(span)
            except (KeyError, TypeError, ValueError, OverflowError) as exc:
                report.bad(line, f"malformed span {n}: {exc}")
                continue
            if record is not None:
                yield line, record
