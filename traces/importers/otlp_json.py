"""OTLP/JSON trace files (what Tempo exports; one ``{"resourceSpans": ...}`` object a
line, or one whole document): spans that carry GenAI attributes or an HTTP route
become records."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport

__all__ = ["read"]


def _value(v: dict[str, Any]) -> Any:
    for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if kind in v:
            return int(v[kind]) if kind == "intValue" else v[kind]
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return None


def _id(text: str | None, size: int) -> bytes | None:
    if not text:
        return None
    raw = bytes.fromhex(text) if len(text) == 2 * size else None
    return raw if raw and any(raw) else None


def _span(span: dict[str, Any]) -> Record | None:
    attrs = {a["key"]: _value(a.get("value", {})) for a in span.get("attributes", [])}
    genai = any(k.startswith("gen_ai.") for k in attrs)
    route = attrs.get("http.route") or attrs.get("url.path")
    if not genai and not route:
        return None
    start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
    finish = attrs.get("gen_ai.response.finish_reasons")
    if not genai:
        path = route
    else:
        path = route or (
            "/v1/chat/completions"
            if attrs.get("gen_ai.operation.name", "chat") == "chat"
            else "/v1/completions"
        )
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


def _documents(path: Path, report: ImportReport) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as f:
        first = f.read(1)
        f.seek(0)
        text = f.read() if first == "{" and "\n{" not in f.read(65536) else None
        f.seek(0)
        if text is not None:  # one document, possibly pretty-printed
            try:
                yield 1, json.loads(text)
            except (ValueError, RecursionError) as exc:
                report.bad(1, f"not OTLP/JSON: {exc}")
            return
        for line, raw in enumerate(f, start=1):  # one document a line (streams)
            if raw.strip():
                try:
                    yield line, json.loads(raw)
                except (ValueError, RecursionError) as exc:
                    report.bad(line, f"not OTLP/JSON: {exc}")


def read(path: Path, report: ImportReport) -> Iterator[Record]:
    for line, doc in _documents(path, report):
        try:
            for rs in doc["resourceSpans"]:
                for ss in rs.get("scopeSpans", []):
                    for span in ss.get("spans", []):
                        record = _span(span)
                        if record is not None:
                            yield record
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            report.bad(line, f"malformed span data: {exc}")
