"""What crosses between stages is defined once: a result archive's replay fields by
``ReplayHeader``, a replay's summary by ``ReplaySummary``; no other module spells
their keys."""

from __future__ import annotations

import ast
import inspect
import json
from dataclasses import fields, replace
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner

from tailreplay import api
from tailreplay.cli import cli
from tailreplay.replayer.replay_summary import ReplaySummary
from tailreplay.traces.archive.capture_header import CaptureHeader, Shadow, shadows_named
from tailreplay.traces.archive.reader import read_header
from tailreplay.traces.archive.replay_header import ReplayHeader, ReplaySettings
from tailreplay.traces.archive.validate import header_problems
from tailreplay.traces.results.stats import BucketStats, ClockSummary, StatsSummary
from tests.helpers import REPO, chat_archive

PRODUCT = ("tailreplay", "traces", "proxy", "replayer", "exporters", "report", "sim")
HOME = Path("traces/archive/replay_header.py")

# The same word naming something else: a record field, a click parameter or choice,
# the proxy's capture map, the client verdict, a report table's column.
OTHER_MEANINGS = {
    "archives": {
        "tailreplay/cli/deploy.py": "the ARCHIVE argument",
        "tailreplay/studies/job_manifest.py": "the archives volume",
        "traces/archive/folders.py": "the ARCHIVES argument's declaration",
    },
    "speed": {
        "tailreplay/studies/capacity_args.py": "--by speed",
        "tailreplay/studies/capacity.py": "CapacityStudy.by: --by speed",
        "tailreplay/cli/deploy.py": "deploy job's own --speed",
        "tailreplay/cli/options.py": "the SPEED parameter type's name",
        "replayer/settings.py": "the SPEED parameter type's name",
        "report/compare.py": "the flag named in a parse error",
        "tailreplay/api.py": "the API's parser of a --speed value, in __all__",
    },
    "amplify": {
        "tailreplay/studies/capacity_args.py": "--by amplify",
    },
    "users": {
        "replayer/settings.py": "the USERS parameter type's name",
        "report/compare.py": "the closed loop table's column",
        "report/tables.py": "the closed loop table's column",
        "traces/workload/scaling.py": "a workload model's scaling, by name",
    },
    "workers": {
        "tailreplay/cli/deploy.py": "replay's --workers, refused in a pod",
        "proxy/config.py": "proxy's --workers, the default of its ProxyOptions field",
    },
    "shard": {
        "tailreplay/cli/deploy.py": "replay's --shard, refused in a pod",
        "traces/archive/record.py": "the result record's field",
        "traces/archive/validate.py": "the result record's field",
        "exporters/spans.py": "the result record's field",
        "traces/results/raw_export.py": "the result record's field",
        "report/side_columns.py": "the result record's field",
        "report/shards.py": "the shards table's column",
        "report/tables.py": "the shards table's column",
    },
    "otlp_live": {"traces/archive/capture_header.py": "the capture map's field"},
    "command": {"tailreplay/studies/job_manifest.py": "a Kubernetes container's field"},
    "seed": {"traces/workload/fit.py": "a synthesis's field"},
    "lag_limit_ms": {
        "traces/results/client_health.py": "the client verdict's field",
        "report/verdict.py": "the client verdict's field",
    },
    "scheduled": {
        "replayer/replay_summary.py": "the summary's field (the same count, as the run ended)",
        "report/write.py": "the report's partial map's field",
        "report/tables.py": "the report's partial map's field",
        "report/verdict.py": "the report's partial map's field",
    },
}


def _strings() -> list[tuple[str, int, str]]:
    out = []
    for folder in PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    out.append((rel, node.lineno, node.value))
    return out


def test_the_replay_headers_keys_are_spelled_in_its_module_alone() -> None:
    keys = {f.name for f in fields(ReplayHeader)}
    found = [
        f"{rel}:{line} {value!r}"
        for rel, line, value in _strings()
        if value in keys and rel != HOME.as_posix() and rel not in OTHER_MEANINGS.get(value, {})
    ]
    assert not found, "read and write these through ReplayHeader:\n" + "\n".join(found)


def test_every_other_meaning_is_still_there() -> None:
    """An allowance that no longer matches anything is stale: remove it."""
    seen = {(rel, value) for rel, _, value in _strings()}
    stale = [
        f"{rel} {key!r}"
        for key, places in OTHER_MEANINGS.items()
        for rel in places
        if (rel, key) not in seen
    ]
    assert not stale


def test_a_header_reads_back_what_was_written() -> None:
    header = ReplayHeader(
        archives=("/a.msgpack", "/b.msgpack"),
        speed="1x..4x",
        speed_mean=2.5,
        phase_seconds={"1x": 10.0, "2x": 5.0},
        users="4,8@1m",
        tail_stretch=1.8,
        tail_quantile=0.99,
        amplify=1.5,
        shard=(2, 4),
        workers=4,
        start_at_ns=1_700_000_000_000_000_000,
        lag_limit_ms=5.0,
        otlp_live=True,
    )
    packed = msgpack.unpackb(msgpack.packb(header.to_map()))
    assert header_problems(packed) == []
    assert ReplayHeader.read(packed) == header
    assert ReplayHeader.read({}) == ReplayHeader()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("shard", [1]),
        ("shard", [5, 2]),
        ("shard", [2, 2]),
        ("shard", [0, 4294967295]),  # a report would list every shard missing
        ("workers", 0),
        ("users", 4),
        ("speed_mean", float("nan")),
    ],
)
def test_a_damaged_field_is_named_and_read_as_absent(key: str, value: object) -> None:
    assert any(p.startswith(f"{key} must be") for p in header_problems({key: value}))
    assert getattr(ReplayHeader.read({key: value}), key) is None


def test_a_dry_runs_header_and_summary_go_through_their_types(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 20, gap_ms=50, seed=3)
    out, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    args = ["replay", "--dry-run", "--speed", "2x", "--shard", "1/2", "--out", str(out)]
    done = CliRunner().invoke(cli, [*args, "--json", str(summary), str(archive)])
    assert done.exit_code == 0, done.output
    header = ReplayHeader.read(read_header(out))
    assert header.speed == "2x" and header.shard == (1, 2)
    assert header.archives == (str(archive.resolve()),)
    document = json.loads(summary.read_text())
    required = {f.name for f in fields(ReplaySummary) if f.default is not None}
    required -= {"extra"}
    assert required <= document.keys()
    assert document["dry_run"] is True and document["tail"]["factor"] == 1.8


CAPTURE_HOME = "traces/archive/capture_header.py"


def _capture_lookups() -> list[str]:
    """Places outside the capture header's module that look its map up by name:
    ``h.get("capture")`` or ``h["capture"]``."""
    out = []
    for folder in PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                key = None
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    if node.func.attr == "get" and node.args:
                        key = node.args[0]
                elif isinstance(node, ast.Subscript):
                    key = node.slice
                if isinstance(key, ast.Constant) and key.value == "capture" and rel != CAPTURE_HOME:
                    out.append(f"{rel}:{node.lineno}")
    return out


def test_the_capture_map_is_read_through_its_type_alone() -> None:
    found = _capture_lookups()
    assert not found, "read the capture map through CaptureHeader:\n" + "\n".join(found)


def test_a_capture_header_reads_back_what_the_proxy_wrote(tmp_path: Path) -> None:
    capture = CaptureHeader(
        bodies="all",
        sample=0.5,
        redact_headers=("authorization", "x-api-key"),
        timeout_s=600.0,
        shed_after_s=0.5,
        routes={"/v2": "http://127.0.0.1:9001"},
        trusted_proxies=("10.0.0.0/8",),
        listen=("127.0.0.1", 8080),
        otlp_live=False,
        shadow=Shadow("http://127.0.0.1:9002", 0.1),
    )
    header = msgpack.unpackb(msgpack.packb({"capture": capture.to_map()}))
    assert header_problems(header) == []
    assert CaptureHeader.read(header) == capture
    assert CaptureHeader.read({"capture": {}}) == CaptureHeader()
    assert CaptureHeader.read({"source": "import"}) is None
    assert shadows_named([header, {"capture": {}}, {}]) == [
        "http://127.0.0.1:9002 at 10%",
        "no shadow",
    ]


@pytest.mark.parametrize(
    ("key", "value"),
    [("listen", ["h"]), ("sample", 2.0), ("timeout_s", float("nan")), ("routes", {"/": 1})],
)
def test_a_damaged_capture_field_is_named_and_read_as_absent(key: str, value: object) -> None:
    header = {"capture": {key: value}}
    assert any(p.startswith(f"capture.{key} must be") for p in header_problems(header))
    capture = CaptureHeader.read(header)
    assert capture is not None and getattr(capture, key) is None


def test_traces_stats_json_is_its_typed_summary_key_for_key(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 30, gap_ms=20, seed=5)
    done = CliRunner().invoke(cli, ["traces", "stats", "--json", str(archive)])
    assert done.exit_code == 0, done.output
    document = json.loads(done.stdout)
    assert document.keys() == StatsSummary.__annotations__.keys()
    assert document["clock"].keys() == ClockSummary.__annotations__.keys()
    for bucket in document["buckets"]:
        assert bucket.keys() == BucketStats.__annotations__.keys()
    assert document["records"] == 30 and sum(b["count"] for b in document["buckets"]) == 30


def test_every_api_function_names_its_arguments() -> None:
    # A typo in a keyword must be a TypeError at the call, not an option silently
    # dropped or passed on to a dataclass with another name for it.
    loose = [
        name
        for name in api.__all__
        if inspect.isfunction(fn := getattr(api, name))
        and any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    ]
    assert not loose
    with pytest.raises(TypeError):
        api.report("r.msgpack", slo_windows=60)  # type: ignore[call-arg]


def test_the_reports_replay_settings_are_their_typed_record(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 20, gap_ms=50, seed=3)
    out = tmp_path / "r.msgpack"
    args = ["replay", "--dry-run", "--speed", "2x", "--tail-stretch", "1.5", "--out", str(out)]
    done = CliRunner().invoke(cli, [*args, str(archive)])
    assert done.exit_code == 0, done.output
    settings = api.report(out).result.report["replay"]
    assert settings.keys() <= ReplaySettings.__annotations__.keys()
    assert {"source", "speed", "tail_stretch", "seed", "command"} <= settings.keys()
    header = ReplayHeader.read(read_header(out))
    assert ReplayHeader.read(settings) == replace(
        header, archives=(), workers=None, start_at_ns=None, lag_limit_ms=None, otlp_live=None
    )
