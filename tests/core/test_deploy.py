"""The manifests in deploy/: valid Kubernetes objects (checked offline against the 1.30
schemas), commands the CLI accepts (with Kubernetes' $(VAR) expansion), and the
production details a platform review asks for — locked-down pods, defined claims,
probes on the ports that serve them, a scrape target, pruning of old captures."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml

from tailreplay.cli import cli
from tailreplay.units import parse_duration, parse_host_port, parse_time
from tests.helpers import REPO

DEPLOY = REPO / "deploy"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
KUBERNETES = "1.30.0"
# Kinds from CRDs, which the published schemas do not cover: checked by hand below.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
NOBODY = 65534
CONTAINER_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": NOBODY,
    "runAsGroup": NOBODY,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def all_documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in documents(path)]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The pod a workload runs (None for objects that run none)."""
    kind, spec = doc["kind"], doc.get("spec", {})
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec.get("template", {}).get("spec")


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def find(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in all_documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def container(doc: dict[str, Any], name: str) -> dict[str, Any]:
    pod = pod_spec(doc)
    assert pod is not None
    (found,) = [c for c in containers(pod) if c["name"] == name]
    return found


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' expansion of a container's command and args: $(VAR) from the
    container's env, $$ a literal $, a $(VAR) not in the env left as written."""

    def one(m: re.Match[str]) -> str:
        return "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0))

    return [re.sub(r"\$\$|\$\((\w+)\)", one, a) for a in args]


def env_of(c: dict[str, Any]) -> dict[str, str]:
    """A container's env as the pod sees it (a Secret's value stands in as a placeholder)."""
    return {e["name"]: e.get("value", "from-a-secret") for e in c.get("env", [])}


def tailreplay_commands() -> list[tuple[str, dict[str, Any]]]:
    """Every container that runs the image's entrypoint, `tailreplay`, with its args."""
    out = []
    for path in MANIFESTS:
        for doc in documents(path):
            pod = pod_spec(doc)
            for c in containers(pod) if pod else []:
                if c["image"].startswith("tailreplay:") and "command" not in c:
                    out.append((f"{path.name}:{c['name']}", c))
    return out


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(doc, id=f"{path.name}:{doc['kind']}/{doc['metadata']['name']}")
        for path in MANIFESTS
        for doc in documents(path)
        if (doc["apiVersion"], doc["kind"]) not in CUSTOM_KINDS
    ],
)
def test_every_object_validates_against_the_kubernetes_schemas(doc: dict[str, Any]) -> None:
    # strict: a field the schema does not know (a typo, a misplaced key) is an error
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_only_known_custom_kinds_are_left_to_the_hand_checks() -> None:
    for doc in all_documents():
        try:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            assert (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS


@pytest.mark.parametrize(
    ("where", "c"), [pytest.param(w, c, id=w) for w, c in tailreplay_commands()]
)
def test_container_args_parse_with_the_real_cli(where: str, c: dict[str, Any]) -> None:
    env = {**env_of(c), "JOB_COMPLETION_INDEX": "3"}  # what an Indexed Job sets
    args = expand(c["args"], env)
    sub = cli.commands[args[0]]
    ctx = sub.make_context(args[0], args[1:])  # raises on an unknown or malformed option
    assert isinstance(ctx, click.Context)
    if args[0] == "replay":
        assert ctx.params["shard"] == (3, 4)
        assert ctx.params["start_at"] == parse_time(env["START_AT"])
        assert str(ctx.params["out"]) == "/results/tailreplay-replay/shard-3.msgpack"
        assert not ctx.params["headers"]  # credentials come from the environment
        assert "TAILREPLAY_HEADER_AUTHORIZATION" in env
    else:
        assert args[0] == "proxy"
        assert str(ctx.params["upstream"]) == "http://127.0.0.1:8000"
        assert ctx.params["fingerprint_key_env"] in env


def test_the_image_runs_tailreplay_or_a_tool_it_holds() -> None:
    """A tailreplay container with a command of its own runs a tool python:3.11-slim has."""
    for doc in all_documents():
        pod = pod_spec(doc)
        for c in containers(pod) if pod else []:
            if c["image"].startswith("tailreplay:") and "command" in c:
                assert c["command"][0] in {"mkdir", "sleep"}, c["name"]


def test_the_job_runs_as_many_shards_as_it_has_completions() -> None:
    doc = find("Job", "tailreplay-replay")
    completions = doc["spec"]["completions"]
    assert doc["spec"]["completionMode"] == "Indexed" and doc["spec"]["parallelism"] == completions
    assert doc["spec"]["backoffLimit"] == 0 and doc["spec"]["ttlSecondsAfterFinished"] > 0
    args = container(doc, "replay")["args"]
    assert args[args.index("--shard") + 1] == f"$(JOB_COMPLETION_INDEX)/{completions}"


def test_every_pod_runs_locked_down() -> None:
    """Non-root, read-only root filesystem, no privilege escalation, no capabilities;
    the volumes' group is the image's user, so it can write them."""
    pods = [(doc, pod_spec(doc)) for doc in all_documents()]
    assert {doc["kind"] for doc, pod in pods if pod} == {"Deployment", "CronJob", "Job", "Pod"}
    for doc, pod in pods:
        if pod is None:
            continue
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        assert pod["securityContext"]["fsGroup"] == NOBODY, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert pod["automountServiceAccountToken"] is False, where
        for c in containers(pod):
            if c["image"].startswith(("tailreplay:", "busybox:")):
                assert c["securityContext"] == CONTAINER_SECURITY, f"{where} {c['name']}"
            else:  # the model server's image runs as root: what it allows
                assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_every_claim_mounted_is_defined_with_the_access_it_needs() -> None:
    claims = {
        d["metadata"]["name"]: d["spec"]["accessModes"]
        for d in all_documents()
        if d["kind"] == "PersistentVolumeClaim"
    }
    assert set(claims) == {"tailreplay-captures", "tailreplay-archives", "tailreplay-results"}
    # Replicas write captures, shards on any node read archives and write results together.
    assert all(modes == ["ReadWriteMany"] for modes in claims.values())
    used = {
        v["persistentVolumeClaim"]["claimName"]
        for doc in all_documents()
        if (pod := pod_spec(doc))
        for v in pod.get("volumes", [])
        if "persistentVolumeClaim" in v
    }
    assert used == set(claims)
    assert find("Deployment", "llm")["spec"]["replicas"] > 1


def _port(c: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in c["ports"] if p.get("name") == port]
    return int(number)


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_probes_ask_what_each_container_serves() -> None:
    """The capture's three probes on its admin port's /healthz; the model server's own
    readiness on vLLM's /health, so the pod is Ready only when both are."""
    deployment = find("Deployment", "llm")
    capture, server = container(deployment, "capture"), container(deployment, "server")
    admin = parse_host_port(_flag(capture["args"], "--admin-listen"), "--admin-listen")[1]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = capture[probe]["httpGet"]
        assert get["path"] == "/healthz" and _port(capture, get["port"]) == admin, probe
        get = server[probe]["httpGet"]
        assert get["path"] == "/health" and _port(server, get["port"]) == 8000, probe
    assert _flag(server["args"], "--port") == "8000"
    assert _flag(capture["args"], "--upstream") == "http://127.0.0.1:8000"


def test_streams_in_flight_finish_on_shutdown() -> None:
    """The capture waits for the endpoints to drop it, drains, and the server outlives
    that; all within the grace period."""
    deployment = find("Deployment", "llm")
    capture, server = container(deployment, "capture"), container(deployment, "server")
    capture_wait = int(capture["lifecycle"]["preStop"]["exec"]["command"][1])
    server_wait = int(server["lifecycle"]["preStop"]["exec"]["command"][1])
    drain = parse_duration(_flag(capture["args"], "--drain-timeout"))
    assert server_wait >= capture_wait + drain
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > server_wait


def test_the_service_monitor_scrapes_the_proxies() -> None:
    """No schema for a CRD offline: its shape, and that it reaches the admin port."""
    (monitor,) = [d for d in all_documents() if d["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", monitor["metadata"]["name"])
    assert set(monitor["spec"]) == {"selector", "endpoints"}
    wanted = monitor["spec"]["selector"]["matchLabels"]
    (service,) = [
        d
        for d in all_documents()
        if d["kind"] == "Service" and wanted.items() <= d["metadata"].get("labels", {}).items()
    ]
    deployment = find("Deployment", "llm")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    capture = container(deployment, "capture")
    admin = parse_host_port(_flag(capture["args"], "--admin-listen"), "--admin-listen")[1]
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
        assert endpoint["path"] == "/metrics" and parse_duration(endpoint["interval"]) > 0
        assert ports[endpoint["port"]]["port"] == admin
        assert _port(capture, ports[endpoint["port"]]["targetPort"]) == admin


def test_the_pruning_job_deletes_old_archives_and_nothing_else(tmp_path: Path) -> None:
    """The CronJob's own command, run here on a folder standing in for the claim
    (GNU find takes the same flags as busybox's)."""
    cron = find("CronJob", "tailreplay-prune-captures")
    prune = container(cron, "prune")
    assert prune["volumeMounts"] == [{"name": "captures", "mountPath": "/captures"}]
    capture = container(find("Deployment", "llm"), "capture")
    assert _flag(capture["args"], "--out") == "/captures"
    # docs/deploy.md: files 7 days old or more go (find counts whole days, rounded down).
    assert _flag(prune["command"], "-mtime") == "+6"
    now = time.time()
    files = {
        "capture-20261101T000000Z-llm-a-1-0000.msgpack.zst": now - 7 * 86400 - 3600,
        "capture-20261101T000000Z-llm-b-1-0000.msgpack": now - 30 * 86400,
        "capture-20261125T000000Z-llm-a-1-0001.msgpack.zst": now - 7 * 86400 + 3600,
        "capture-20261201T000000Z-llm-a-1-0002.msgpack.zst": now,
        "notes.txt": now - 30 * 86400,
    }
    for name, mtime in files.items():
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (mtime, mtime))
    command = [str(tmp_path) if a == "/captures" else a for a in prune["command"]]
    subprocess.run(command, check=True, capture_output=True, timeout=30)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["capture-20261125T000000Z-llm-a-1-0001.msgpack.zst",
                    "capture-20261201T000000Z-llm-a-1-0002.msgpack.zst", "notes.txt"]  # fmt: skip
