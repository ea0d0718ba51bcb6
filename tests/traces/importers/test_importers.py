"""Importers against the real public traces in tests/data, and hand-written samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import DATA


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize(
    ("name", "count", "span", "inp", "out"),
    [
        ("code", 8819, 3435.9, (1469, 7303, 7436), (13, 90, 251)),
        ("conv", 19366, 3501.7, (1020, 4083, 4142), (129, 451, 601)),
    ],
)
def test_azure_matches_its_published_summary(
    tmp_path: Path, name: str, count: int, span: float, inp: tuple, out: tuple
) -> None:
    archive = tmp_path / f"{name}.msgpack"
    src = DATA / f"azure_llm_2023/AzureLLMInferenceTrace_{name}.csv"
    code, _, err = _run("traces", "import", "azure", str(src), "-o", str(archive))
    assert code == 0, err
    code, stats, _ = _run("traces", "stats", "--json", str(archive))
    s = json.loads(stats)
    assert s["records"] == count
    assert s["duration_s"] == pytest.approx(span, abs=0.05)
    assert [round(s["input_tokens"][q]) for q in ("p50", "p95", "p99")] == list(inp)
    assert [round(s["output_tokens"][q]) for q in ("p50", "p95", "p99")] == list(out)


def test_har_files_import_with_counts_methods_statuses_and_no_credentials(tmp_path: Path) -> None:
    for name, count, first_status in (
        ("http2-chrome.har", 11, 200),
        ("www.sitespeed.io-redirecting-to-https.har", 15, 301),
    ):
        src = DATA / "har_pagexray" / name
        doc = json.loads(src.read_text(encoding="utf-8-sig"))
        archive = tmp_path / f"{name}.msgpack"
        code, _, err = _run("traces", "import", "har", str(src), "-o", str(archive))
        assert code == 0, err
        records = list(ArchiveReader([archive], order="file"))
        assert len(records) == count
        assert [r.method for r in records] == [
            e["request"]["method"] for e in doc["log"]["entries"]
        ]
        assert records[0].status == first_status
        assert all(
            r.status == e["response"]["status"]
            for r, e in zip(records, doc["log"]["entries"], strict=True)
        )
        cookies = [
            h["value"]
            for e in doc["log"]["entries"]
            for h in e["request"]["headers"]
            if h["name"].lower() in ("cookie", "authorization")
        ]
        assert cookies, "the fixture carries cookies"
        data = archive.read_bytes()
        assert not any(c.encode() in data for c in cookies)
    # Start times: the first entry of the Chrome capture.
    first = next(iter(ArchiveReader([tmp_path / "http2-chrome.har.msgpack"], order="file")))
    assert first.start_ns == 1453646505818000000  # 2016-01-24T14:41:45.818Z


def test_mooncake_round_trips(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 12, "hash_ids": [0, 1]},
        {
            "timestamp": 0,
            "input_length": 600,
            "output_length": 40,
            "hash_ids": [0, 2],
            "session_id": 7,
        },
        {"timestamp": 27, "input_length": 512, "output_length": 3, "hash_ids": [3]},
        {"timestamp": 1500, "input_length": 2048, "output_length": 100, "hash_ids": [0, 1, 4, 5]},
    ]
    src = tmp_path / "trace.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    archive, back = tmp_path / "a.msgpack", tmp_path / "back.jsonl"
    assert _run("traces", "import", "mooncake", str(src), "-o", str(archive))[0] == 0
    code, _, err = _run("traces", "export", "mooncake", str(archive), "-o", str(back))
    assert code == 0, err
    assert [json.loads(line) for line in back.read_text().splitlines()] == rows


def test_burstgpt_and_failures(tmp_path: Path) -> None:
    src = tmp_path / "burst.csv"
    src.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n"
    )
    archive = tmp_path / "a.msgpack"
    assert _run("traces", "import", "burstgpt", str(src), "-o", str(archive))[0] == 0
    r = list(ArchiveReader([archive], order="file"))
    assert [x.start_ns for x in r] == [5 * 10**9, 45 * 10**9, 118 * 10**9]
    assert [x.error for x in r] == [None, "failed", None]
    assert [x.model for x in r] == ["ChatGPT", "ChatGPT", "GPT-4"]


def test_otlp_json_spans_become_records(tmp_path: Path) -> None:
    def attr(k: str, v: object) -> dict:
        key = "intValue" if isinstance(v, int) else "stringValue"
        return {"key": k, "value": {key: str(v) if key == "intValue" else v}}

    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
        "name": "chat llama", "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001500000000",
        "attributes": [
            attr("gen_ai.operation.name", "chat"), attr("gen_ai.request.model", "llama"),
            attr("gen_ai.usage.input_tokens", 120), attr("gen_ai.usage.output_tokens", 30),
            attr("http.response.status_code", 200),
        ],
    }  # fmt: skip
    other = {**span, "spanId": "00f067aa0ba902b7", "attributes": [attr("db.system", "redis")]}
    embed = {
        **span,
        "spanId": "00f067aa0ba902b8",
        "attributes": [attr("gen_ai.operation.name", "embeddings")],
    }
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span, other, embed]}]}]}
    src = tmp_path / "t.json"
    src.write_text(json.dumps(doc) + "\n" + json.dumps(doc) + "\n")
    archive = tmp_path / "a.msgpack"
    assert _run("traces", "import", "otlp-json", str(src), "-o", str(archive))[0] == 0
    r = list(ArchiveReader([archive], order="file"))
    assert len(r) == 4
    # A span that names its operation but no route is sent where that operation is served.
    assert [x.path for x in r] == ["/v1/chat/completions", "/v1/embeddings"] * 2
    assert r[0].trace_id == bytes.fromhex(span["traceId"]) and r[0].duration_ns == 1_500_000_000
    assert (r[0].model, r[0].input_tokens, r[0].output_tokens, r[0].status) == (
        "llama",
        120,
        30,
        200,
    )


def test_malformed_rows_are_reported_with_line_numbers(tmp_path: Path) -> None:
    src = tmp_path / "azure.csv"
    src.write_bytes(
        b"TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
        b"2023-11-16 18:15:46.6844585,374,44\r\n"
        b"2023-11-16 18:15:50.9174613,oops,11\r\n"
        b"2023-11-16 18:15:51.1021347,396,109"
    )
    archive = tmp_path / "a.msgpack"
    code, _, err = _run("traces", "import", "azure", str(src), "-o", str(archive))
    assert code == 0 and f"{src}:3:" in err and "skipped" in err
    assert len(list(ArchiveReader([archive]))) == 2
    code, _, err = _run("traces", "import", "azure", str(src), "-o", str(archive), "--strict")
    assert code == 3 and f"{src}:3:" in err


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02binary\x00"], ids=["empty", "binary"])
@pytest.mark.parametrize("fmt", ["azure", "mooncake", "burstgpt", "har", "otlp-json"])
def test_empty_or_binary_input_is_one_line_exit_3(tmp_path: Path, fmt: str, content: bytes) -> None:
    src = tmp_path / "in"
    src.write_bytes(content)
    code, _, err = _run("traces", "import", fmt, str(src), "-o", str(tmp_path / "o.msgpack"))
    assert code == 3
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_export_jsonl_has_hex_ids(tmp_path: Path) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"timestamp": 0, "input_length": 5, "output_length": 2}) + "\n")
    archive, out = tmp_path / "a.msgpack", tmp_path / "o.jsonl"
    _run("traces", "import", "mooncake", str(src), "-o", str(archive))
    assert _run("traces", "export", "jsonl", str(archive), "-o", str(out))[0] == 0
    obj = json.loads(out.read_text())
    assert len(obj["trace_id"]) == 32 and int(obj["trace_id"], 16) >= 0
    assert np.isclose(obj["input_tokens"], 5)


@pytest.mark.parametrize(
    ("fmt", "text", "bad_line"),
    [
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
            '{"timestamp": "soon", "input_length": 5, "output_length": 1}\n'
            '{"timestamp": 9, "input_length": 5, "output_length": 1}\n',
            2,
        ),
        (
            "burstgpt",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "1,ChatGPT,10,5,15,Conversation log\n"
            "2,ChatGPT,ten,5,15,Conversation log\n"
            "3,ChatGPT,10,5,15,Conversation log\n",
            3,
        ),
    ],
)
def test_malformed_rows_in_other_formats(
    tmp_path: Path, fmt: str, text: str, bad_line: int
) -> None:
    src = tmp_path / "in.txt"
    src.write_text(text)
    archive = tmp_path / "a.msgpack"
    code, _, err = _run("traces", "import", fmt, str(src), "-o", str(archive))
    assert code == 0 and f"{src}:{bad_line}:" in err
    assert len(list(ArchiveReader([archive]))) == 2
    code, _, err = _run("traces", "import", fmt, str(src), "-o", str(archive), "--strict")
    assert code == 3 and f"{src}:{bad_line}:" in err


@pytest.mark.parametrize(
    "args",
    [
        ["traces", "import", "mooncake", "SRC"],
        ["traces", "export", "jsonl", "ARCHIVE"],
        ["traces", "merge", "ARCHIVE"],
    ],
)
def test_output_in_a_missing_directory_is_one_line(tmp_path: Path, args: list[str]) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"timestamp": 0, "input_length": 5, "output_length": 2}) + "\n")
    archive = tmp_path / "a.msgpack"
    _run("traces", "import", "mooncake", str(src), "-o", str(archive))
    argv = [str(src) if a == "SRC" else str(archive) if a == "ARCHIVE" else a for a in args]
    code, _, err = _run(*argv, "-o", str(tmp_path / "missing" / "out"))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "no such directory" in err


def test_a_failing_disk_is_one_line_exit_3_not_a_short_archive(tmp_path: Path) -> None:
    import resource
    import signal
    import subprocess
    import sys

    src = tmp_path / "azure.csv"
    rows = [f"2023-11-16 18:15:{i // 100:02d}.{i % 100:02d}0000,{100 + i},{10 + i % 50}"
            for i in range(5000)]  # fmt: skip
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")

    def small_disk() -> None:  # files past 20 kB fail with EFBIG, as a full disk would
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    out = subprocess.run(
        [sys.executable, "-m", "tailreplay", "traces", "import", "azure", str(src),
         "-o", str(tmp_path / "a.msgpack")],
        capture_output=True, text=True, timeout=120, preexec_fn=small_disk,
    )  # fmt: skip
    assert out.returncode == 3, out.stderr
    assert "write failed" in out.stderr and "Traceback" not in out.stderr
