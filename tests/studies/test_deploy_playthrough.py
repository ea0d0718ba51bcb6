"""The Indexed Job, played without a cluster: `tailreplay deploy job` prints it, each
pod's own containers run here as processes (its init container, then the image's
entrypoint with the container's args), with JOB_COMPLETION_INDEX and the container's
env set and $(VAR) expanded as Kubernetes does, all shards at once against the
built-in simulator. The results are merged as docs/deploy.md tells a user to; every
recorded request must have been sent once, on the unsharded run's schedule."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader, read_header
from tailreplay.units import parse_time
from tests.core.test_deploy import DEPLOY, env_of, expand
from tests.helpers import write_plain

ROOT = DEPLOY.parent
SHARDS = 3
T0 = 1_700_000_000 * 10**9


def _archive(path: Path) -> list[dict[str, Any]]:
    """200 chat requests over about 4 s (times to the nanosecond: no coarse clock ticks
    for the replay to spread)."""
    rng = random.Random(19)
    maps, t = [], T0
    for i in range(200):
        t += rng.randint(0, 4 * 10**7)
        maps.append(
            {
                "start_ns": t,
                "trace_id": rng.randbytes(16),
                "span_id": rng.randbytes(8),
                "method": "POST",
                "path": "/v1/chat/completions",
                "model": "m",
                "stream": i % 2 == 0,
                "status": 200,
                "input_tokens": rng.randint(20, 200),
                "output_tokens": rng.randint(2, 6),
                "duration_ns": rng.randint(10**8, 10**9),
            }
        )
    write_plain(path, maps)
    return maps


def _entrypoint() -> list[str]:
    """The image's ENTRYPOINT, as this machine runs it."""
    (line,) = [
        x for x in (DEPLOY / "Dockerfile").read_text().splitlines() if x.startswith("ENTRYPOINT")
    ]
    assert json.loads(line.split(None, 1)[1]) == ["tailreplay"]
    return [sys.executable, "-m", "tailreplay"]


def _docs_report() -> tuple[str, list[str]]:
    """The run name and the report command docs/deploy.md gives."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    found = re.search(r"tailreplay report /results/([a-z0-9-]+)/shard-\*\.msgpack([^'\"\n]*)", text)
    assert found is not None, "docs/deploy.md gives no `tailreplay report /results/...` command"
    return found.group(1), found.group(2).split()


def _play(job: dict[str, Any], local: dict[str, Path], logs: Path) -> list[int]:
    """Every pod of the Job at once: init containers, then the container's command."""

    def here(arg: str) -> str:  # the claims' mounts are folders of tmp_path here
        return re.sub(
            r"(^|=)/(archives|results)(?=/|$)", lambda m: m.group(1) + str(local[m.group(2)]), arg
        )

    pod = job["spec"]["template"]["spec"]
    (replay,) = pod["containers"]
    procs = []
    for index in range(job["spec"]["completions"]):
        env = {**env_of(replay), "JOB_COMPLETION_INDEX": str(index)}
        for init in pod["initContainers"]:
            command = [here(a) for a in expand(init["command"], env)]
            subprocess.run(command, check=True, timeout=30)
        assert "command" not in replay  # the image's entrypoint runs
        args = [here(a) for a in expand(replay["args"], env)]
        with open(logs / f"pod-{index}.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [*_entrypoint(), *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env},
                )
            )
    return [p.wait(timeout=180) for p in procs]


def test_the_indexed_job_sends_every_request_once_on_one_schedule(tmp_path: Path) -> None:
    local = {"archives": tmp_path / "archives", "results": tmp_path / "results"}
    for folder in local.values():
        folder.mkdir()
    maps = _archive(local["archives"] / "window.msgpack")
    name, report_args = _docs_report()
    with sim_process(["--profile", "fast", "--max-num-seqs", "512"]) as sim:
        printed = CliRunner().invoke(
            cli,
            ["deploy", "job", "/archives/window.msgpack", "--shards", str(SHARDS),
             "--start-in", "10s", "--name", name, "--target", sim, "--speed", "2x"],
        )  # fmt: skip
        assert printed.exit_code == 0, printed.stderr
        (job,) = [d for d in yaml.safe_load_all(printed.stdout) if d]
        codes = _play(job, local, tmp_path)
    logs = {p.name: p.read_text() for p in tmp_path.glob("pod-*.log")}
    assert codes == [0] * SHARDS, logs

    run = local["results"] / name
    shards = [list(ArchiveReader([run / f"shard-{i}.msgpack"])) for i in range(SHARDS)]
    for i, records in enumerate(shards):
        assert read_header(run / f"shard-{i}.msgpack")["shard"] == [i, SHARDS]
        assert {r.shard for r in records} == {i} and len(records) > 20
        assert json.loads((run / f"shard-{i}.json").read_text())["requests"] == len(records)
    sent = [r for records in shards for r in records]
    # Every recorded request sent once, by exactly one shard.
    assert Counter(r.orig_trace_id for r in sent) == Counter(m["trace_id"] for m in maps)
    # One schedule: due at START_AT plus the recorded offset over the speed...
    start_at = parse_time(job["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"])
    first = min(m["start_ns"] for m in maps)
    starts = {m["trace_id"]: m["start_ns"] for m in maps}
    for r in sent:
        assert r.orig_trace_id is not None and r.intended_ns is not None
        assert abs(r.intended_ns - (start_at + (starts[r.orig_trace_id] - first) / 2)) <= 1
    # ...which is the unsharded run's, to the nanosecond.
    dry = tmp_path / "unsharded.msgpack"
    whole = CliRunner().invoke(
        cli,
        ["replay", "--dry-run", "--speed", "2x", "--start-at", str(start_at / 1e9),
         "--out", str(dry), str(local["archives"] / "window.msgpack")],
    )  # fmt: skip
    assert whole.exit_code == 0, whole.stderr
    schedule = Counter((r.orig_trace_id, r.intended_ns) for r in ArchiveReader([dry]))
    assert Counter((r.orig_trace_id, r.intended_ns) for r in sent) == schedule

    # One report over the shards, as docs/deploy.md has it (the shell expands the glob).
    report = tmp_path / "report.json"
    files = [str(p) for p in sorted(run.glob("shard-*.msgpack"))]
    extra = [re.sub(r"^/results/[a-z0-9-]+", str(run), a) for a in report_args]
    done = subprocess.run(
        [*_entrypoint(), "report", *files, *extra, "--json", str(report)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    merged = json.loads(report.read_text())
    assert merged["deltas"]["joined"] == len(maps)
    assert merged["overall"]["replayed"]["requests"] == len(maps)
    assert merged["overall"]["recorded"]["requests"] == len(maps)
