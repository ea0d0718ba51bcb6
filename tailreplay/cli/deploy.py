"""``tailreplay deploy job``: one sharded replay as a Kubernetes Indexed Job manifest.

The command's options, checked into a ``JobSpec`` with ``START_AT`` a little after
now; the Job is built by ``tailreplay.studies.job_manifest`` and goes to stdout as
YAML (``| kubectl apply -f -``). Nothing is sent to a cluster and the archive is not
opened here: ARCHIVE is a path as the pods see it, under the archives claim's mount.
The replay's arguments are parsed with the real ``replay`` command before anything
is printed, so a wrong option fails here, not in N pods.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import click
from click.core import ParameterSource
from yarl import URL

from tailreplay import shared_options as shared
from tailreplay.cli.option_fields import declared_options, take
from tailreplay.cli.options import SPEED_TEXT
from tailreplay.declared import Setting, Text, declared
from tailreplay.errors import UsageError
from tailreplay.http.header_rules import header_problem
from tailreplay.studies.job_manifest import (
    ARCHIVES_MOUNT,
    MAX_SHARDS,
    JobSpec,
    expand,
    job_manifest,
    replay_args,
)
from tailreplay.studies.yaml_text import to_yaml
from tailreplay.units import format_duration, parse_duration
from tailreplay.version import __version__

__all__ = ["deploy"]

_IMAGE = f"tailreplay:{__version__}"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
# Options the Job sets itself; --replay-arg may not set them too.
_RESERVED = {
    "shard": "--shard is the pod's completion index: use --shards",
    "start_at": "--start-at is the run's START_AT: use --start-in",
    "out": "--out is /results/NAME/shard-<i>.msgpack",
    "json_out": "--json is /results/NAME/shard-<i>.json",
    "target": "use deploy job's --target",
    "speed": "use deploy job's --speed",
    "workers": "one process per pod: raise --shards instead of --workers",
}
_PROBE_ARCHIVE = "/archives/probe.msgpack"
START_IN_S = (10.0, 7 * 86400.0)
"""--start-in's range: time for every pod to be scheduled, pull and start; at most a week."""
_INT32 = 2**31 - 1
"""The largest a Job's ``ttlSecondsAfterFinished`` and ``activeDeadlineSeconds`` take."""


@click.group()
def deploy() -> None:
    """Kubernetes manifests for tailreplay runs (printed, never applied)."""


def _header_secret(text: str, flag: str) -> tuple[str, str, str]:
    header, _, ref = text.partition("=")
    secret, _, key = ref.partition("/")
    if (
        not _HEADER_NAME.fullmatch(header)
        or not _dns(secret, _DNS_SUBDOMAIN, 253)
        or not _SECRET_KEY.fullmatch(key)
        or len(key) > 253
        or key in (".", "..")
    ):
        raise UsageError(
            f"invalid {flag} {text!r}: use HEADER=SECRET/KEY, e.g. Authorization=llm-staging/auth"
        )
    # The replay reads it as TAILREPLAY_HEADER_*, by the rule of every added header:
    # refused here, not when the Job's pods start.
    if (problem := header_problem(header, "a value")) is not None:
        raise UsageError(f"invalid {flag}: {problem}")
    return header, secret, key


def _duration(text: str, flag: str, *, positive: bool = False) -> float:
    try:
        seconds = parse_duration(text)
    except UsageError:
        seconds = math.nan
    if not seconds >= 0 or (positive and seconds == 0):
        after = "a time after now, e.g. 2m" if positive else "a duration, e.g. 1h or 0s"
        raise UsageError(f"invalid {flag} {text!r}: give {after}")
    return seconds


def _seconds(text: str, flag: str, *, positive: bool = False) -> int:
    """A whole number of seconds a Job's field can hold (int32)."""
    seconds = math.ceil(_duration(text, flag, positive=positive))
    if seconds > _INT32:
        raise UsageError(f"invalid {flag} {text!r}: at most {_INT32:,} s (68 years)")
    return seconds


def _start_in(text: str, flag: str) -> float:
    seconds = _duration(text, flag, positive=True)
    low, high = START_IN_S
    if not low <= seconds <= high:
        raise UsageError(
            f"invalid {flag} {text!r}: give {format_duration(low)} to {format_duration(high)} "
            "(every pod must be scheduled, pull the image and start before START_AT)"
        )
    return seconds


def _deadline(text: str, flag: str) -> int:
    return _seconds(text, flag, positive=True)


@dataclass(frozen=True, kw_only=True)
class JobArgs:
    """``deploy job``'s options, parsed: one field per option, named as click names it,
    declared in the order ``--help`` lists them (``tailreplay/declared.py``)."""

    archives: tuple[str, ...] = declared(
        Setting("archives", None, argument=True, multiple=True, required=True, metavar="ARCHIVE...")
    )
    shards: int = declared(
        Setting(
            "--shards",
            None,
            "Pods, one shard each.",
            kind=int,
            low=1,
            high=MAX_SHARDS,
            required=True,
        )
    )
    start_in: float = declared(
        Setting(
            "--start-in",
            "2m",
            "START_AT is now plus this: time for every pod to be scheduled, pull and start.",
            kind=Text("duration", _start_in),
            show_default=True,
        )
    )
    name: str | None = declared(
        Setting("--name", None, "The Job's name (default: tailreplay-replay-<UTC time>).")
    )
    image: str = declared(
        Setting("--image", _IMAGE, "The image built from deploy/Dockerfile.", show_default=True)
    )
    target: URL | None = declared(
        replace(shared.TARGET, help="Base URL to replay at, as the pods reach it.")
    )
    speed: str = declared(replace(shared.SPEED, kind=SPEED_TEXT.text))
    """As given: each pod's replay parses it."""
    ttl: int = declared(
        Setting(
            "--ttl",
            "1h",
            "Delete the finished Job and its pods this long after (the results stay).",
            kind=Text("duration", _seconds),
            show_default=True,
        )
    )
    deadline: int = declared(
        Setting(
            "--deadline",
            "24h",
            "Fail the Job if it has not finished this long after START_AT (a pod that "
            "cannot pull its image never fails on its own).",
            kind=Text("duration", _deadline),
            show_default=True,
        )
    )
    results_claim: str = declared(
        Setting(
            "--results-claim",
            "tailreplay-results",
            "The claim mounted at /results (ReadWriteMany: the shards write together).",
            show_default=True,
        )
    )
    archives_claim: str = declared(
        Setting(
            "--archives-claim",
            "tailreplay-archives",
            "The claim mounted read-only at /archives.",
            show_default=True,
        )
    )
    header_secrets: tuple[tuple[str, str, str], ...] = declared(
        Setting(
            "--header-secret",
            None,
            "HEADER=SECRET/KEY: send HEADER with the value held in a Secret (repeatable), "
            "e.g. Authorization=llm-staging/authorization for a key holding 'Bearer ...'.",
            kind=Text("header=secret/key", _header_secret),
            multiple=True,
        )
    )
    extra_args: tuple[str, ...] = declared(
        Setting(
            "--replay-arg",
            None,
            "One more argument of replay for every pod (repeatable), e.g. "
            "--replay-arg=--otlp-endpoint=http://otel-collector:4318/v1/traces.",
            multiple=True,
        )
    )


@deploy.command("job")
@declared_options(JobArgs)
def job(**options: Any) -> None:
    """Print a sharded replay of ARCHIVE (a path under /archives, as the pods see it)
    as an Indexed Job: every pod replays its shard from one START_AT."""
    now = datetime.now(UTC)
    args = take(JobArgs, options)
    spec = _spec(now, args)
    if spec.target is None:
        click.echo(
            "warning: no --target: every pod replays against a built-in simulator of its "
            "own (a smoke test of the Job, not a load test)",
            err=True,
        )
    click.echo(to_yaml(job_manifest(spec), comment=_comment(spec)), nl=False)
    click.echo(
        f"{spec.name}: {spec.shards} shards start at {spec.start_at} "
        f"({format_duration(args.start_in)} from now); results in {spec.results_dir}/ "
        f"on the claim {spec.results_claim}",
        err=True,
    )


def _spec(now: datetime, args: JobArgs) -> JobSpec:
    """The run the options describe; every refusal first, as one line."""
    name = args.name
    name = f"tailreplay-replay-{now:%Y%m%d-%H%M%S}" if name is None else name
    longest = 63 - len(f"-{args.shards - 1}")  # pods' hostnames are NAME-<index>: a DNS label
    if not _dns(name, _DNS_LABEL, longest):
        raise UsageError(
            f"invalid --name {name!r}: lowercase letters, digits and '-', starting and ending "
            f"with a letter or digit, at most {longest} characters"
        )
    for flag, claim in (
        ("--results-claim", args.results_claim),
        ("--archives-claim", args.archives_claim),
    ):
        if not _dns(claim, _DNS_SUBDOMAIN, 253):
            raise UsageError(f"invalid {flag} {claim!r}: not a Kubernetes object name")
    for archive in args.archives:
        _check_archive(archive)
    image = args.image
    if not image or any(c.isspace() for c in image) or not _utf8(image):
        raise UsageError(f"invalid --image {image!r}: an image reference, e.g. {_IMAGE}")
    _check_header_secrets(args.header_secrets)
    start = datetime.fromtimestamp(math.ceil(now.timestamp() + args.start_in), UTC)
    spec = JobSpec(
        name=name,
        archives=args.archives,
        shards=args.shards,
        start_at=start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        image=image,
        target=str(args.target) if args.target is not None else None,
        speed=args.speed,
        ttl_s=args.ttl,
        deadline_s=min(math.ceil(args.start_in) + args.deadline, _INT32),
        results_claim=args.results_claim,
        archives_claim=args.archives_claim,
        header_secrets=args.header_secrets,
        extra_args=args.extra_args,
    )
    _check_extra_args(spec.extra_args)
    _check_parses(spec)
    return spec


def _check_header_secrets(secrets: tuple[tuple[str, str, str], ...]) -> None:
    """Each header once: two spellings of one (Authorization, authorization) would be
    one variable in the pod, the last silently winning."""
    seen: set[str] = set()
    for header, _, _ in secrets:
        if header.lower() in seen:
            raise UsageError(f"--header-secret {header}: that header is given twice")
        seen.add(header.lower())


def _dns(text: str, form: re.Pattern[str], longest: int) -> bool:
    return len(text) <= longest and form.fullmatch(text) is not None


def _utf8(text: str) -> bool:
    """No byte that is not UTF-8 (a surrogate escape): YAML could not carry it."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace") == text


def _check_archive(archive: str) -> None:
    parts = PurePosixPath(archive).parts
    if not _utf8(archive):
        raise UsageError(f"ARCHIVE {archive!r}: not UTF-8; rename it")
    if len(parts) < 3 or parts[:2] != ("/", ARCHIVES_MOUNT[1:]) or ".." in parts:
        raise UsageError(
            f"ARCHIVE {archive}: give the path as the pods see it, under {ARCHIVES_MOUNT}/ "
            f"(where --archives-claim is mounted), e.g. {ARCHIVES_MOUNT}/peak.msgpack"
        )


def _check_extra_args(extra: tuple[str, ...]) -> None:
    """--replay-arg holds options of replay that the Job does not set itself."""
    from tailreplay.cli.replay import replay

    for arg in extra:
        if arg.split("=")[0] in ("-h", "--help", "--version"):
            raise UsageError(f"--replay-arg {arg}: not an option of a run")
    try:
        ctx = replay.make_context("replay", [*extra, _PROBE_ARCHIVE])
    except click.ClickException as exc:
        raise UsageError(f"--replay-arg: {exc.format_message()}") from None
    except UsageError as exc:  # a value tailreplay's own parsers refused
        raise UsageError(f"--replay-arg: {exc}") from None
    if ctx.params["archives"] != (Path(_PROBE_ARCHIVE),):
        raise UsageError("--replay-arg takes options of replay; give archives as ARCHIVE")
    for param, why in _RESERVED.items():
        if ctx.get_parameter_source(param) is ParameterSource.COMMANDLINE:
            raise UsageError(f"--replay-arg: {why}")


def _check_parses(spec: JobSpec) -> None:
    """The pods' command line, as Kubernetes expands it, parses with the real replay."""
    from tailreplay.cli.replay import replay

    args = expand(replay_args(spec), {"START_AT": spec.start_at, "JOB_COMPLETION_INDEX": "0"})
    try:
        replay.make_context("replay", args[1:])
    except click.ClickException as exc:
        raise UsageError(exc.format_message()) from None


def _comment(spec: JobSpec) -> str:
    from tailreplay.replayer.run import LATE_START_S

    return (
        f"tailreplay deploy job (tailreplay {__version__}): {spec.shards} shards of "
        f"{' '.join(spec.archives)},\n"
        f"all starting at START_AT {spec.start_at}. Apply it now: a pod that starts\n"
        f"more than {LATE_START_S:g} s after START_AT refuses to run.\n"
        f"Results: {spec.results_dir}/shard-<i>.msgpack on the claim {spec.results_claim}.\n"
        f"One report: tailreplay report {spec.results_dir}/shard-*.msgpack"
    )
