"""A sharded replay as a Kubernetes Indexed Job: the run's settings (``JobSpec``), the
replay container's command line (``replay_args``, and ``expand``: how Kubernetes
expands it), and the Job itself as a Kubernetes object (``job_manifest``).

Each run gets its own Job: a name, a shared ``START_AT``, as many completions as
shards, and its results in a folder of their own on the results claim. Nothing here
checks the settings or talks to a cluster: ``tailreplay deploy job`` checks them,
prints the Job as YAML (``yaml_text``), and ``kubectl apply`` sends it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ARCHIVES_MOUNT",
    "CONTAINER_SECURITY",
    "INDEX",
    "MAX_SHARDS",
    "POD_SECURITY",
    "RESULTS_MOUNT",
    "JobSpec",
    "expand",
    "job_manifest",
    "replay_args",
]

ARCHIVES_MOUNT = "/archives"
RESULTS_MOUNT = "/results"
INDEX = "$(JOB_COMPLETION_INDEX)"
"""Set by Kubernetes in every pod of an Indexed Job (0 .. completions - 1)."""

# The user the image runs as (deploy/Dockerfile: USER 65534:65534, "nobody"); the
# group owns the volumes (fsGroup), so the pods can write the results claim.
POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "runAsGroup": 65534,
    "fsGroup": 65534,
    "fsGroupChangePolicy": "OnRootMismatch",  # no recursive chown of a full volume per pod
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "runAsGroup": 65534,
    "readOnlyRootFilesystem": True,  # the replay writes only its results (and /dev/shm)
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}

MAX_SHARDS = 100_000
"""Kubernetes' bound on an Indexed Job's completions and parallelism."""


@dataclass(frozen=True)
class JobSpec:
    """One run's Job: everything ``job_manifest`` needs, checked by ``deploy job``."""

    name: str
    archives: tuple[str, ...]
    shards: int
    start_at: str
    """UTC ISO-8601 with a Z: ``2026-12-01T09:00:00Z``."""
    image: str
    target: str | None
    speed: str
    ttl_s: int
    deadline_s: int
    """``activeDeadlineSeconds``: from the Job's start, --start-in plus --deadline."""
    results_claim: str
    archives_claim: str
    header_secrets: tuple[tuple[str, str, str], ...] = ()
    """(header, secret, key): the header's value comes from that key of that Secret."""
    extra_args: tuple[str, ...] = ()

    @property
    def results_dir(self) -> str:
        return f"{RESULTS_MOUNT}/{self.name}"


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' expansion of container args: ``$(VAR)`` from the container's env,
    ``$$`` a literal ``$``, an unknown ``$(VAR)`` left as written."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return [re.sub(r"\$\$|\$\((\w+)\)", one, arg) for arg in args]


def replay_args(spec: JobSpec) -> list[str]:
    """The replay container's args (the image's entrypoint is ``tailreplay``). The
    user's values are written ``$`` as ``$$``, so Kubernetes passes them as given."""
    shard_file = f"{spec.results_dir}/shard-{INDEX}"
    args = ["replay", "--shard", f"{INDEX}/{spec.shards}", "--start-at", "$(START_AT)"]
    if spec.target is not None:
        args += ["--target", _literal(spec.target)]
    args += ["--speed", _literal(spec.speed), "--out", f"{shard_file}.msgpack"]
    args += ["--json", f"{shard_file}.json", *map(_literal, spec.extra_args)]
    return [*args, *map(_literal, spec.archives)]


def _literal(text: str) -> str:
    return text.replace("$", "$$")


def _labels(spec: JobSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "tailreplay",
        "app.kubernetes.io/component": "replay",
        "app.kubernetes.io/instance": spec.name,
    }


def job_manifest(spec: JobSpec) -> dict[str, Any]:
    """The Indexed Job of one sharded replay, as a Kubernetes object."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "completionMode": "Indexed",
            "completions": spec.shards,
            "parallelism": spec.shards,  # every shard at once: they share one schedule
            "backoffLimit": 0,  # an experiment is rerun whole, never one shard again
            "ttlSecondsAfterFinished": spec.ttl_s,
            "activeDeadlineSeconds": spec.deadline_s,
            "template": {"metadata": {"labels": _labels(spec)}, "spec": _pod(spec)},
        },
    }


def _pod(spec: JobSpec) -> dict[str, Any]:
    results = {"name": "results", "mountPath": RESULTS_MOUNT}
    env: list[dict[str, Any]] = [{"name": "START_AT", "value": spec.start_at}]
    for header, secret, key in spec.header_secrets:
        env.append(
            {
                "name": "TAILREPLAY_HEADER_" + header.upper().replace("-", "_"),
                "valueFrom": {"secretKeyRef": {"name": secret, "key": key}},
            }
        )
    replay = {
        "name": "replay",
        "image": spec.image,
        "args": replay_args(spec),
        "env": env,
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "securityContext": CONTAINER_SECURITY,
        "volumeMounts": [
            {"name": "archives", "mountPath": ARCHIVES_MOUNT, "readOnly": True},
            results,
        ],
    }
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": POD_SECURITY,
        # Shards on different nodes where there is room: each one's lag is its own.
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": spec.name}},
            }
        ],
        # The run's results folder, made by every pod (mkdir -p: whichever comes first).
        "initContainers": [
            {
                "name": "results-dir",
                "image": spec.image,
                "command": ["mkdir", "-p", spec.results_dir],
                # Namespaces whose quota asks every container for them.
                "resources": {
                    "requests": {"cpu": "10m", "memory": "16Mi"},
                    "limits": {"memory": "64Mi"},
                },
                "securityContext": CONTAINER_SECURITY,
                "volumeMounts": [results],
            }
        ],
        "containers": [replay],
        "volumes": [
            {
                "name": "archives",
                "persistentVolumeClaim": {"claimName": spec.archives_claim, "readOnly": True},
            },
            {"name": "results", "persistentVolumeClaim": {"claimName": spec.results_claim}},
        ],
    }
