"""`traces inspect`, `slice` and `peak` on real archives (including the Azure trace)."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader, read_header
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.writer import ArchiveWriter
from tests.helpers import DATA, random_maps, write_plain

AZURE_CONV = DATA / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _azure_archive(path: Path) -> list[Record]:
    """The Azure conversation trace as records (a stand-in for the importer to come)."""
    records = []
    with open(AZURE_CONV, newline="") as f:
        for row in csv.DictReader(f):
            ts = datetime.fromisoformat(row["TIMESTAMP"][:26]).replace(tzinfo=UTC)
            start = int(ts.timestamp()) * 10**9 + int(row["TIMESTAMP"][20:].ljust(9, "0")[:9])
            records.append(
                Record(
                    start_ns=start,
                    path="/v1/chat/completions",
                    stream=True,
                    input_tokens=int(row["ContextTokens"]),
                    output_tokens=int(row["GeneratedTokens"]),
                )
            )
    with ArchiveWriter(path, header=make_header("import:azure", ordered=True)) as w:
        for r in records:
            w.append(r)
    return records


def test_inspect_shows_ids_in_hex_and_times_in_iso(tmp_path: Path) -> None:
    maps = random_maps(5)
    path = write_plain(tmp_path / "a.msgpack", maps)
    code, out, _ = _run("traces", "inspect", str(path), "-n", "2")
    assert code == 0
    assert "format" in out and "tailreplay" in out
    assert out.count("record ") == 2
    assert maps[0]["trace_id"].hex() in out and maps[1]["trace_id"].hex() in out
    assert maps[2]["trace_id"].hex() not in out
    iso = datetime.fromtimestamp(maps[0]["start_ns"] // 10**9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert iso in out
    if "duration_ns" in maps[0]:
        assert f"{maps[0]['duration_ns'] / 1e6:.3f} ms" in out


def test_slice_by_time_path_model_and_status(tmp_path: Path) -> None:
    maps = random_maps(400)
    path = write_plain(tmp_path / "a.msgpack", maps)
    out = tmp_path / "s.msgpack"
    t0 = maps[0]["start_ns"]
    code, _, err = _run(
        "traces", "slice", str(path), "-o", str(out), "--from", "+5s", "--to", "+30s",
        "--path", "/v1/chat/*", "--model", "qwen2-7b", "--status", "2xx",
    )  # fmt: skip
    assert code == 0, err
    want = [
        m for m in maps
        if t0 + 5 * 10**9 <= m["start_ns"] < t0 + 30 * 10**9
        and m["path"] == "/v1/chat/completions" and m["model"] == "qwen2-7b" and m["status"] == 200
    ]  # fmt: skip
    got = list(ArchiveReader([out]).iter_maps())
    assert got == want and len(want) > 5
    assert read_header(out)["source"] == "slice"
    code, _, _ = _run("traces", "slice", str(path), "-o", str(out), "--status", "error")
    assert code == 0
    assert all(m.get("error") for m in ArchiveReader([out]).iter_maps())
    code, _, err = _run("traces", "slice", str(path), "-o", str(out), "--from", "yesterday")
    assert code == 2 and "invalid time 'yesterday'" in err


def test_slice_with_iso_times(tmp_path: Path) -> None:
    base = 1_700_000_000 * 10**9  # 2023-11-14T22:13:20Z
    maps = [{"start_ns": base + i * 10**9} for i in range(60)]
    path = write_plain(tmp_path / "a.msgpack", maps)
    out = tmp_path / "s.msgpack"
    code, _, _ = _run(
        "traces", "slice", str(path), "-o", str(out),
        "--from", "2023-11-14T22:13:30Z", "--to", "2023-11-14T22:13:40",
    )  # fmt: skip
    assert code == 0
    assert [m["start_ns"] for m in ArchiveReader([out]).iter_maps()] == [
        base + i * 10**9 for i in range(10, 20)
    ]


def test_peak_finds_the_busiest_window_of_the_azure_trace(tmp_path: Path) -> None:
    src = tmp_path / "azure.msgpack"
    records = _azure_archive(src)
    starts = sorted(r.start_ns for r in records)
    window = 5 * 60 * 10**9
    # Brute force over every window starting at a record.
    import bisect

    best = max(range(len(starts)), key=lambda i: bisect.bisect_left(starts, starts[i] + window) - i)
    best_count = bisect.bisect_left(starts, starts[best] + window) - best

    out = tmp_path / "peak.msgpack"
    code, _, err = _run("traces", "peak", str(src), "--window", "5m", "-o", str(out))
    assert code == 0, err
    got = [m["start_ns"] for m in ArchiveReader([out]).iter_maps()]
    assert len(got) == best_count
    assert got[0] == starts[best] and got[-1] < starts[best] + window
    assert f"{best_count:,} requests" in err
    header = read_header(out)
    assert header["peak"] == {"window_s": 300.0, "by": "requests", "start_ns": starts[best]}

    code, stats_out, _ = _run("traces", "stats", "--json", str(out))
    assert json.loads(stats_out)["records"] == best_count

    out2 = tmp_path / "peak-tokens.msgpack"
    code, _, err = _run(
        "traces", "peak", str(src), "--window", "5m", "--by", "tokens", "-o", str(out2)
    )
    assert code == 0
    total = sum((m["input_tokens"] + m["output_tokens"]) for m in ArchiveReader([out2]).iter_maps())
    assert f"{total:,} tokens" in err


def test_peak_rejects_bad_window(tmp_path: Path) -> None:
    path = write_plain(tmp_path / "a.msgpack", random_maps(10))
    code, _, err = _run(
        "traces", "peak", str(path), "--window", "ten minutes", "-o", str(tmp_path / "o")
    )
    assert code == 2 and "invalid duration" in err


def test_stats_of_the_azure_trace_match_its_published_summary(tmp_path: Path) -> None:
    # tests/data/README.md: 19,366 requests over 3,501.7 s, mean rate 5.530 req/s,
    # input P50/P95/P99 1,020/4,083/4,142, output 129/451/601.
    src = tmp_path / "azure.msgpack"
    _azure_archive(src)
    code, out, _ = _run("traces", "stats", "--json", str(src))
    assert code == 0
    got = json.loads(out)
    assert got["records"] == 19_366
    assert got["duration_s"] == pytest.approx(3501.7, abs=0.05)
    assert got["rate_rps"] == pytest.approx(5.530, abs=0.0005)
    assert [got["input_tokens"][q] for q in ("p50", "p95", "p99")] == [1020, 4083, 4142]
    assert [got["output_tokens"][q] for q in ("p50", "p95", "p99")] == [129, 451, 601]
    assert got["latency_ms"] is None and got["error_rate"] == 0.0
