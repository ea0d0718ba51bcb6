"""``tailreplay deploy job``: a valid Indexed Job per run, whose pods' args the real
replay accepts, and one line with exit 2 for a wrong value."""

from __future__ import annotations

import os
import re
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tailreplay.cli import cli
from tailreplay.errors import EXIT_USAGE
from tailreplay.studies.replay import send_headers
from tailreplay.studies.yaml_text import to_yaml
from tailreplay.units import parse_time
from tests.core.test_deploy import CONTAINER_SECURITY, DEPLOY, KUBERNETES, NOBODY, env_of, expand

JOB = ["deploy", "job", "/archives/peak.msgpack"]


def _print(*args: str) -> tuple[dict[str, Any], str, str]:
    result = CliRunner().invoke(cli, [*JOB, *args])
    assert result.exit_code == 0, result.stderr
    (doc,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    return doc, result.stdout, result.stderr


def test_the_printed_job_is_valid_and_every_pod_runs_its_shard() -> None:
    before = datetime.now(UTC).timestamp()
    doc, _, err = _print("--shards", "3", "--start-in", "2m", "--target", "http://llm:8000",
                         "--speed", "2x", "--ttl", "30m")  # fmt: skip
    after = datetime.now(UTC).timestamp()
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    name = doc["metadata"]["name"]
    assert re.fullmatch(r"tailreplay-replay-\d{8}-\d{6}", name)
    spec = doc["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] == 1800
    # A pod that can never start (an image it cannot pull) fails the Job a day after
    # START_AT, rather than holding it (and its TTL) forever.
    assert spec["activeDeadlineSeconds"] == 120 + 24 * 3600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["fsGroup"] == NOBODY
    (init,) = pod["initContainers"]
    (replay,) = pod["containers"]
    assert init["command"] == ["mkdir", "-p", f"/results/{name}"]
    assert replay["securityContext"] == init["securityContext"] == CONTAINER_SECURITY
    env = env_of(replay)
    start_at = env["START_AT"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", start_at)
    assert before + 120 <= parse_time(start_at) / 1e9 <= after + 121
    assert start_at in err and f"/results/{name}/" in err and len(err.splitlines()) == 1
    for index in range(3):
        args = expand(replay["args"], {**env, "JOB_COMPLETION_INDEX": str(index)})
        assert args[0] == "replay"
        ctx = cli.commands["replay"].make_context("replay", args[1:])
        assert ctx.params["shard"] == (index, 3)
        assert ctx.params["start_at"] == parse_time(start_at)
        assert str(ctx.params["out"]) == f"/results/{name}/shard-{index}.msgpack"
        assert str(ctx.params["json_out"]) == f"/results/{name}/shard-{index}.json"
        assert str(ctx.params["target"]) == "http://llm:8000"
        assert str(ctx.params["speed"]) == "2x"
        assert ctx.params["archives"] == (Path("/archives/peak.msgpack"),)
    mounts = {m["mountPath"]: m for m in replay["volumeMounts"]}
    assert mounts["/archives"]["readOnly"] is True and "/results" in mounts


def test_claims_image_secrets_and_replay_options_are_the_runs() -> None:
    doc, _, _ = _print(
        "--shards", "2", "--name", "peak-2x", "--image", "registry.example/tailreplay:0.1.0",
        "--results-claim", "results-b", "--archives-claim", "archives-b",
        "--header-secret", "Authorization=llm-staging/authorization",
        "--header-secret", "X-Api-Key=gateway/key",
        "--replay-arg=--otlp-endpoint=http://collector:4318/v1/traces", "--replay-arg=--limit=100",
    )  # fmt: skip
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    pod = doc["spec"]["template"]["spec"]
    (replay,) = pod["containers"]
    assert doc["metadata"]["name"] == "peak-2x" and replay["image"].startswith("registry.example")
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
    assert claims == {"archives": "archives-b", "results": "results-b"}
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in replay["env"] if "valueFrom" in e}
    assert secrets == {
        "TAILREPLAY_HEADER_AUTHORIZATION": {"name": "llm-staging", "key": "authorization"},
        "TAILREPLAY_HEADER_X_API_KEY": {"name": "gateway", "key": "key"},
    }
    # The names the replay reads its headers from.
    with mock.patch.dict(os.environ, dict.fromkeys(secrets, "v"), clear=True):
        assert send_headers(()) == {"Authorization": "v", "X-Api-Key": "v"}
    env = {**env_of(replay), "JOB_COMPLETION_INDEX": "1"}
    ctx = cli.commands["replay"].make_context("replay", expand(replay["args"], env)[1:])
    assert ctx.params["limit"] == 100
    assert ctx.params["otlp_endpoint"] == "http://collector:4318/v1/traces"
    assert ctx.params["target"] is None


def test_without_a_target_it_says_each_pod_brings_its_own_simulator() -> None:
    _, _, err = _print("--shards", "2")
    assert err.startswith("warning: no --target: every pod replays against a built-in")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--shards", "0"], "'--shards': 0 is not in the range 1<=x<=100000"),
        (["--shards", "100001"], "'--shards': 100001 is not in the range 1<=x<=100000"),
        (["--shards", "2", "--start-in", "2s"], "invalid --start-in '2s': give 10s to 7d"),
        (["--shards", "2", "--start-in", "10000000d"], "invalid --start-in '10000000d'"),
        (["--shards", "2", "--ttl", "25000d"], "invalid --ttl '25000d': at most 2,147,483,647 s"),
        (["--shards", "2", "--deadline", "0s"], "invalid --deadline '0s'"),
        (["--shards", "2", "--image", ""], "invalid --image ''"),
        (["--shards", "2", "--image", "a b"], "invalid --image 'a b'"),
        (["--shards", "2", "--name", ""], "invalid --name ''"),
        (["--shards", "2", "--header-secret", "Authorization=llm/.."], "use HEADER=SECRET/KEY"),
        (["--shards", "2", "--header-secret", "Host=llm/host"], "Host is written by the HTTP"),
        (
            ["--shards", "2", "--header-secret", f"Authorization=llm/{'k' * 254}"],
            "use HEADER=SECRET/KEY",
        ),
        (["--shards", "2", "--image", "tailreplay:\udcff"], "invalid --image"),
        (
            [
                "--shards",
                "2",
                "--header-secret",
                "Authorization=a/b",
                "--header-secret",
                "authorization=a/c",
            ],
            "authorization: that header is given twice",
        ),
        (["--shards", "2", "--start-in", "-1m"], "invalid --start-in '-1m'"),
        (["--shards", "2", "--start-in", "0s"], "invalid --start-in '0s'"),
        (["--shards", "2", "--name", "Peak_2x"], "invalid --name 'Peak_2x'"),
        (["--shards", "2", "--name", "peak-"], "invalid --name 'peak-'"),
        (["--shards", "100", "--name", "a" * 61], "at most 60 characters"),
        (["--shards", "2", "--ttl", "soon"], "invalid --ttl 'soon'"),
        (["--shards", "2", "--speed", "fast"], "invalid --speed 'fast'"),
        (["--shards", "2", "--target", "llm:8000"], "invalid --target 'llm:8000'"),
        (["--shards", "2", "--results-claim", "Results"], "invalid --results-claim"),
        (["--shards", "2", "--header-secret", "Authorization"], "use HEADER=SECRET/KEY"),
        (["--shards", "2", "--replay-arg=--shard=0/2"], "use --shards"),
        (["--shards", "2", "--replay-arg=--workers=2"], "raise --shards"),
        (["--shards", "2", "--replay-arg=--out=/tmp/x"], "--out is /results/NAME"),
        (["--shards", "2", "--replay-arg=--no-such-flag"], "No such option"),
        (["--shards", "2", "--replay-arg=--timeout=later"], "invalid duration 'later'"),
        (["--shards", "2", "--replay-arg=/archives/more.msgpack"], "give archives as ARCHIVE"),
        (["--shards", "2", "--replay-arg=--help"], "not an option of a run"),
    ],
)
def test_a_wrong_value_is_one_line_and_the_usage_exit_code(args: list[str], says: str) -> None:
    result = CliRunner().invoke(cli, [*JOB, *args])
    assert result.exit_code == EXIT_USAGE
    assert result.stdout == ""  # nothing half-printed to pipe into kubectl
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ") and says in line


@pytest.mark.parametrize(
    "archive", ["peak.msgpack", "/data/peak.msgpack", "/archives/../x", "/archives", "/archivesx/a"]
)
def test_the_archive_is_a_path_under_the_archives_mount(archive: str) -> None:
    result = CliRunner().invoke(cli, ["deploy", "job", archive, "--shards", "2"])
    assert result.exit_code == EXIT_USAGE
    (line,) = result.stderr.splitlines()
    assert f"ARCHIVE {archive}: give the path as the pods see it, under /archives/" in line


def test_the_example_job_in_deploy_is_what_the_command_prints() -> None:
    """deploy/replay-job.yaml is the command in its first comment's output, START_AT aside."""
    text = (DEPLOY / "replay-job.yaml").read_text()
    comment = re.search(r"what\n((?:#  .*\n)+)# prints", text)
    assert comment is not None
    command = shlex.split(re.sub(r"\\\n|^#", " ", comment.group(1), flags=re.M))
    assert command[:3] == ["tailreplay", "deploy", "job"]
    result = CliRunner().invoke(cli, command[1:])
    assert result.exit_code == 0, result.stderr
    (start_at,) = set(re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", result.stdout))
    (fixed,) = set(re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text))
    assert text.endswith(result.stdout.replace(start_at, fixed))


# Strings YAML could read as something else, or not read back at all, if written plainly.
_WORDS = ["yes", "No", "ON", "null", "~", "-", "-p", "--shard", "$(A)/4", "1e3", "0x1f",
          "2026-01-01", "a: b", "#x", "- x", "=", "<<", ".inf", "1Gi", "", " a", "a ", '"q"',
          "'", "\\", "é", "\n", "--a=b=c", "_", "tailreplay:0.1.0", "http://h:1/v", "+1",
          "?x", "!x", "&a", "*a", "%x", "@x", "|", ">", "\x85", "\u2028", "\ufeff",
          "\U0001f600"]  # fmt: skip
_TEXT = st.one_of(st.sampled_from(_WORDS), st.text(max_size=10))
_TREE = st.recursive(
    st.one_of(_TEXT, st.integers(-(10**12), 10**12), st.booleans()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, _TREE, min_size=1, max_size=5))
def test_the_yaml_reads_back_as_the_object_it_was_made_from(obj: dict[str, Any]) -> None:
    assert yaml.safe_load(to_yaml(obj, comment="a comment\nof two lines")) == obj


def test_a_dollar_in_a_value_reaches_the_pod_as_given() -> None:
    """Kubernetes reads ``$(VAR)`` and ``$$`` in container args: the user's ``$`` is
    written ``$$``, so the expanded command holds the path and options as given."""
    archive, header = "/archives/a$$b$(HOME).msgpack", "--header=X-Run: a$$b$(HOME)"
    result = CliRunner().invoke(cli, ["deploy", "job", archive, "--shards", "2",
                                      f"--replay-arg={header}"])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (doc,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    (replay,) = doc["spec"]["template"]["spec"]["containers"]
    # HOME as if the pod's env held it: unescaped, $(HOME) would become /root.
    env = {**env_of(replay), "HOME": "/root", "JOB_COMPLETION_INDEX": "0"}
    args = expand(replay["args"], env)
    assert args[-1] == archive and header in args
