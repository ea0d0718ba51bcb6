"""Spans at a real OTLP receiver: Arize Phoenix, over OTLP/HTTP and (in a netns) gRPC."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tests.helpers import chat_archive
from tests.telemetry.conftest import IN_NETNS, Phoenix


def _ns(iso: str) -> int:
    # Phoenix returns microseconds; the original times are whole microseconds here.
    dt = datetime.fromisoformat(iso)
    return round(dt.timestamp() * 1e6) * 1000


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout + result.stderr


# Distinct seeds per test: Phoenix files a trace under the project of its first span,
# and a replay's spans join the recorded traces.


def test_replay_of_200_requests_lands_in_phoenix(tmp_path: Path, phoenix: Phoenix) -> None:
    chat_archive(tmp_path / "a.msgpack", 200, gap_ms=10, seed=1)
    code, out = _run(
        "replay", str(tmp_path / "a.msgpack"), "--speed", "2x",
        "--out", str(tmp_path / "r.msgpack"),
        "--otlp-endpoint", phoenix.traces,
        "--resource", "openinference.project.name=replay",
    )  # fmt: skip
    assert code == 0, out
    assert "spans: 200 exported" in out
    spans = phoenix.spans("replay", expect=200)
    assert len(spans) == 200
    for span in spans:
        a = span["attributes"]
        assert span["name"] == "replay chat llama-3-8b"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == "llama-3-8b"
        assert a["gen_ai.usage.output_tokens"] >= 2
        assert a["http.response.status_code"] == 200
        assert "tailreplay.replay.lag_ms" in a


def test_export_of_1000_records_keeps_original_start_times(
    tmp_path: Path, phoenix: Phoenix
) -> None:
    maps = chat_archive(tmp_path / "a.msgpack", 1000, gap_ms=3.5, seed=2)
    code, out = _run(
        "traces", "export", "otlp", str(tmp_path / "a.msgpack"),
        "--otlp-endpoint", phoenix.traces,
        "--resource", "openinference.project.name=export",
    )  # fmt: skip
    assert code == 0, out
    spans = phoenix.spans("export", expect=1000)
    assert len(spans) == 1000
    starts = {s["context"]["span_id"]: _ns(s["start_time"]) for s in spans}
    assert starts == {m["span_id"].hex(): m["start_ns"] for m in maps}


@pytest.mark.skipif(
    not IN_NETNS,
    reason="gRPC needs a private network namespace (Phoenix's gRPC port binds every "
    "interface); `make test-telemetry` makes one where unshare -n is allowed",
)
def test_grpc_export_to_phoenix(tmp_path: Path, phoenix: Phoenix) -> None:
    maps = chat_archive(tmp_path / "a.msgpack", 100, gap_ms=5, seed=3)
    code, out = _run(
        "traces", "export", "otlp", str(tmp_path / "a.msgpack"),
        "--otlp-endpoint", phoenix.grpc, "--otlp-protocol", "grpc", "--otlp-insecure",
        "--resource", "openinference.project.name=grpc",
    )  # fmt: skip
    assert code == 0, out
    spans = phoenix.spans("grpc", expect=100)
    assert {s["context"]["span_id"] for s in spans} == {m["span_id"].hex() for m in maps}
