"""The manifests in deploy/ run commands the CLI accepts, with Kubernetes' $(VAR) expansion."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from tailreplay.cli import cli
from tailreplay.units import parse_time

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _containers(path: Path) -> list[dict[str, Any]]:
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        spec = doc.get("spec", {})
        pod = spec.get("template", {}).get("spec", {})
        out += [
            c for c in pod.get("containers", []) if str(c.get("image", "")).startswith("tailreplay")
        ]
    return out


def _expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) substitution in container args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]


@pytest.mark.parametrize(
    ("manifest", "command"), [("proxy-sidecar.yaml", "proxy"), ("replay-job.yaml", "replay")]
)
def test_manifest_args_parse_with_the_real_cli(manifest: str, command: str) -> None:
    (container,) = _containers(DEPLOY / manifest)
    env = {e["name"]: e.get("value", "from-a-secret") for e in container.get("env", [])}
    env["JOB_COMPLETION_INDEX"] = "3"  # what an Indexed Job sets
    args = _expand(container["args"], env)
    assert args[0] == command
    sub = cli.commands[command]
    ctx = sub.make_context(command, args[1:])  # raises on an unknown or malformed option
    assert isinstance(ctx, click.Context)
    if command == "replay":
        assert ctx.params["shard"] == (3, 4)
        assert ctx.params["start_at"] == parse_time(env["START_AT"])
        assert str(ctx.params["out"]) == "/results/shard-3.msgpack"
        assert not ctx.params["headers"]  # credentials come from the environment
        assert "TAILREPLAY_HEADER_AUTHORIZATION" in env
    else:
        assert str(ctx.params["upstream"]) == "http://127.0.0.1:8000"
        assert ctx.params["fingerprint_key_env"] in env


def test_the_job_runs_as_many_shards_as_it_has_completions() -> None:
    (doc,) = list(yaml.safe_load_all((DEPLOY / "replay-job.yaml").read_text()))
    completions = doc["spec"]["completions"]
    assert doc["spec"]["completionMode"] == "Indexed" and doc["spec"]["parallelism"] == completions
    (container,) = _containers(DEPLOY / "replay-job.yaml")
    shard = container["args"][container["args"].index("--shard") + 1]
    assert shard == f"$(JOB_COMPLETION_INDEX)/{completions}"
