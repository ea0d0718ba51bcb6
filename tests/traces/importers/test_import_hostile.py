"""Importers against the inputs an adversarial run found: each malformed row is a
counted skip named by its line (or HAR entry), ``--strict`` makes it one error line
and exit 3, and nothing ends in a traceback. ``test_import_fuzz.py`` attacks the
same readers with mutations of real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
AZURE_ROW = "2023-11-16 18:15:4{}.6844585,374,44\r\n"
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
HUGE = "x" * 200_000  # over the csv module's default field limit (128 KiB)
GOOD_ENTRY = {
    "startedDateTime": "2016-01-24T14:41:45.818Z",
    "time": 12.5,
    "request": {"method": "GET", "url": "https://a.example/b?c=1", "headers": []},
    "response": {"status": 200, "bodySize": 10},
    "timings": {"wait": 3.0},
}
MOONCAKE_ROW = '{{"timestamp": {}, "input_length": 5, "output_length": 1}}\n'


def _har(*entries: object) -> str:
    return json.dumps({"log": {"version": "1.2", "entries": list(entries)}})


def _entry(**changes: object) -> dict[str, object]:
    return {**GOOD_ENTRY, **changes}


def _request(**changes: object) -> dict[str, object]:
    return {**GOOD_ENTRY["request"], **changes}  # type: ignore[dict-item]


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output
    return result.exit_code, result.stderr


# (format, file text, the place named in the warning, records kept)
CASES = [
    pytest.param(
        "azure",
        AZURE_HEADER + AZURE_ROW.format(1) + f'"{HUGE}",1,2\r\n' + AZURE_ROW.format(2),
        ":3:",
        2,
        id="azure-huge-field",
    ),
    pytest.param(
        "burstgpt",
        BURST_HEADER + "1,a,10,5,15,x\n" + f'2,"{HUGE}",10,5,15,x\n' + "3,a,10,5,15,x\n",
        ":3:",
        2,
        id="burstgpt-huge-field",
    ),
    pytest.param(
        "har", _har(GOOD_ENTRY, "GET /", GOOD_ENTRY), ": entry 2:", 2, id="har-entry-a-string"
    ),
    pytest.param(
        "har",
        _har(GOOD_ENTRY, _entry(request="GET /"), GOOD_ENTRY),
        ": entry 2:",
        2,
        id="har-request-a-string",
    ),
    pytest.param(
        "har",
        _har(GOOD_ENTRY, _entry(response="200"), GOOD_ENTRY),
        ": entry 2:",
        2,
        id="har-response-a-string",
    ),
    pytest.param(
        "har",
        _har(GOOD_ENTRY, _entry(request=_request(headers=7)), GOOD_ENTRY),
        ": entry 2:",
        2,
        id="har-headers-a-number",
    ),
    pytest.param(
        "har",
        _har(GOOD_ENTRY, _entry(startedDateTime=1453646505), GOOD_ENTRY),
        ": entry 2:",
        2,
        id="har-started-an-int",
    ),
    pytest.param(
        "har",
        _har(GOOD_ENTRY, _entry(timings="fast"), GOOD_ENTRY),
        ": entry 2:",
        2,
        id="har-timings-a-string",
    ),
    pytest.param(
        "mooncake",
        MOONCAKE_ROW.format(0) + MOONCAKE_ROW.format("NaN") + MOONCAKE_ROW.format(9),
        ":2:",
        2,
        id="mooncake-nan",
    ),
    pytest.param(
        "mooncake",
        MOONCAKE_ROW.format(0) + MOONCAKE_ROW.format("Infinity") + MOONCAKE_ROW.format(9),
        ":2:",
        2,
        id="mooncake-infinity",
    ),
    pytest.param(
        "mooncake",
        MOONCAKE_ROW.format(0) + MOONCAKE_ROW.format("1e400") + MOONCAKE_ROW.format(9),
        ":2:",
        2,
        id="mooncake-overflow",
    ),
]


@pytest.mark.parametrize(("fmt", "text", "place", "kept"), CASES)
def test_a_malformed_row_is_a_counted_skip_or_with_strict_one_line(
    tmp_path: Path, fmt: str, text: str, place: str, kept: int
) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "a.msgpack"
    src.write_text(text, newline="")
    code, err = _run("traces", "import", fmt, str(src), "-o", str(out))
    assert code == 0, err
    assert f"{src}{place}" in err and "skipped" in err, err
    assert len(list(ArchiveReader([out], order="file"))) == kept
    out.unlink()
    code, err = _run("traces", "import", fmt, str(src), "-o", str(out), "--strict")
    assert code == 3, err
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: ") and f"{src}{place}" in line


@pytest.mark.parametrize(
    "doc",
    [{"log": {"entries": 5}}, {"log": {"entries": {"a": 1}}}, {"log": []}, [1, 2]],
    ids=["entries-a-number", "entries-an-object", "log-a-list", "a-list"],
)
def test_a_har_file_without_a_list_of_entries_is_one_line_exit_3(
    tmp_path: Path, doc: object
) -> None:
    src = tmp_path / "in.har"
    src.write_text(json.dumps(doc))
    code, err = _run("traces", "import", "har", str(src), "-o", str(tmp_path / "a.msgpack"))
    assert code == 3
    (line,) = err.strip().splitlines()
    assert "not a HAR file" in line


def _otlp_span(span_id: str, model: str) -> dict[str, object]:
    return {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": span_id,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001500000000",
        "attributes": [{"key": "gen_ai.request.model", "value": {"stringValue": model}}],
    }


def _otlp_doc(*spans: object) -> dict[str, object]:
    return {"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}


@pytest.mark.parametrize("indent", [None, 2, 0], ids=["one-line", "pretty", "indent-0"])
def test_a_single_otlp_json_document_imports(tmp_path: Path, indent: int | None) -> None:
    doc = _otlp_doc(_otlp_span("b7ad6b7169203331", "a"), _otlp_span("00f067aa0ba902b7", "b"))
    src, out = tmp_path / "t.json", tmp_path / "a.msgpack"
    src.write_text(json.dumps(doc, indent=indent))
    code, err = _run("traces", "import", "otlp-json", str(src), "-o", str(out))
    assert code == 0, err
    assert [r.model for r in ArchiveReader([out], order="file")] == ["a", "b"]


def test_one_bad_span_does_not_lose_the_others_in_its_document(tmp_path: Path) -> None:
    bad = {**_otlp_span("00f067aa0ba902b7", "b"), "attributes": "gen_ai"}
    doc = _otlp_doc(_otlp_span("b7ad6b7169203331", "a"), bad, _otlp_span("1111111111111111", "c"))
    src, out = tmp_path / "t.json", tmp_path / "a.msgpack"
    src.write_text(json.dumps(doc, indent=1))
    code, err = _run("traces", "import", "otlp-json", str(src), "-o", str(out))
    assert code == 0 and "span 2" in err, err
    assert [r.model for r in ArchiveReader([out], order="file")] == ["a", "c"]


def test_a_multi_document_file_with_a_damaged_first_line_keeps_the_rest(tmp_path: Path) -> None:
    doc = json.dumps(_otlp_doc(_otlp_span("b7ad6b7169203331", "a")))
    src, out = tmp_path / "t.jsonl", tmp_path / "a.msgpack"
    src.write_text(doc[:40] + "\n" + doc + "\n" + doc + "\n")
    code, err = _run("traces", "import", "otlp-json", str(src), "-o", str(out))
    assert code == 0 and f"{src}:1:" in err, err
    assert len(list(ArchiveReader([out], order="file"))) == 2


@pytest.mark.parametrize("fmt", ["azure", "burstgpt", "mooncake", "otlp-json"])
def test_a_byte_order_mark_and_crlf_are_read(tmp_path: Path, fmt: str) -> None:
    text = {
        "azure": AZURE_HEADER + AZURE_ROW.format(1) + AZURE_ROW.format(2),
        "burstgpt": BURST_HEADER + "1,a,10,5,15,x\n" + "3,a,10,5,15,x\n",
        "mooncake": MOONCAKE_ROW.format(0) + MOONCAKE_ROW.format(9),
        "otlp-json": "\n".join(
            json.dumps(_otlp_doc(_otlp_span(s, "a")))
            for s in ("b7ad6b7169203331", "00f067aa0ba902b7")
        ),
    }[fmt]
    src, out = tmp_path / "in.txt", tmp_path / "a.msgpack"
    src.write_bytes(b"\xef\xbb\xbf" + text.replace("\r\n", "\n").replace("\n", "\r\n").encode())
    code, err = _run("traces", "import", fmt, str(src), "-o", str(out))
    assert code == 0 and "warning" not in err, err
    assert len(list(ArchiveReader([out], order="file"))) == 2


def test_a_line_that_is_not_utf8_is_a_skipped_row(tmp_path: Path) -> None:
    src, out = tmp_path / "in.csv", tmp_path / "a.msgpack"
    rows = [
        AZURE_ROW.format(1).encode(),
        b"2023-11-16 18:15:4\xff.1,3,4\r\n",
        AZURE_ROW.format(3).encode(),
    ]
    src.write_bytes(AZURE_HEADER.encode() + b"".join(rows))
    code, err = _run("traces", "import", "azure", str(src), "-o", str(out))
    assert code == 0 and f"{src}:3:" in err and "UTF-8" in err, err
    assert len(list(ArchiveReader([out], order="file"))) == 2


def test_an_invalid_value_is_named_by_its_line(tmp_path: Path) -> None:
    src, out = tmp_path / "in.jsonl", tmp_path / "a.msgpack"
    src.write_text(
        MOONCAKE_ROW.format(0)
        + '{"timestamp": 1, "input_length": 1099511627776, "output_length": 1}\n'
        + MOONCAKE_ROW.format(9)
    )
    code, err = _run("traces", "import", "mooncake", str(src), "-o", str(out))
    assert code == 0 and f"{src}:2: 'input_tokens' must be" in err, err
