"""What crosses between stages is defined once: a result archive's replay fields by
``ReplayHeader``, a replay's summary by ``ReplaySummary``; no other module spells
their keys."""

from __future__ import annotations

import ast
import json
from dataclasses import fields
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.replayer.replay_summary import ReplaySummary
from tailreplay.traces.archive.reader import read_header
from tailreplay.traces.archive.replay_header import ReplayHeader
from tailreplay.traces.archive.validate import header_problems
from tests.helpers import chat_archive

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("tailreplay", "traces", "proxy", "replayer", "exporters", "report", "sim")
HOME = Path("traces/archive/replay_header.py")

# The same word naming something else: a record field, a click parameter or choice,
# the proxy's capture map, the client verdict, a report table's column.
OTHER_MEANINGS = {
    "archives": {
        "tailreplay/cli/replay.py": "the ARCHIVES argument",
        "tailreplay/cli/capacity.py": "the ARCHIVES argument",
        "tailreplay/cli/deploy.py": "the ARCHIVE argument",
        "tailreplay/studies/job_manifest.py": "the archives volume",
    },
    "speed": {
        "tailreplay/cli/capacity.py": "--by speed",
        "tailreplay/studies/capacity.py": "CapacityStudy.by: --by speed",
        "tailreplay/cli/deploy.py": "deploy job's own --speed",
        "tailreplay/cli/options.py": "the SPEED parameter type's name",
        "report/compare.py": "the flag named in a parse error",
        "tailreplay/api.py": "the API's parser of a --speed value, in __all__",
    },
    "amplify": {
        "tailreplay/cli/capacity.py": "--by amplify",
        "tailreplay/studies/capacity.py": "CapacityStudy.by: --by amplify",
    },
    "users": {
        "tailreplay/cli/options.py": "the USERS parameter type's name",
        "report/compare.py": "the closed loop table's column",
        "report/tables.py": "the closed loop table's column",
    },
    "workers": {"tailreplay/cli/deploy.py": "replay's --workers, refused in a pod"},
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
    "otlp_live": {
        "proxy/config.py": "the capture map's field",
        "traces/archive/validate.py": "the capture map's field",
        "exporters/otlp_export.py": "the capture map's field",
    },
    "command": {"tailreplay/studies/job_manifest.py": "a Kubernetes container's field"},
    "seed": {"traces/workload/fit.py": "a synthesis's field"},
    "lag_limit_ms": {
        "traces/results/client_health.py": "the client verdict's field",
        "report/verdict.py": "the client verdict's field",
    },
    "scheduled": {
        "replayer/replay_summary.py": "the summary's field (the same count, as the run ended)",
        "report/partial.py": "the report's partial map's field",
        "report/tables.py": "the report's partial map's field",
        "report/verdict.py": "the report's partial map's field",
    },
}


def _strings() -> list[tuple[str, int, str]]:
    out = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
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
    [("shard", [1]), ("workers", 0), ("users", 4), ("speed_mean", float("nan"))],
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
