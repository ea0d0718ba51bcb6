"""``ReplayArgs`` is ``replay``'s options, typed: a field for every option with click's
default, and ``to_argv`` writes any of them back as arguments the real parser reads
to the same value (what the studies' child replays and the deploy job's pods run)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from tailreplay.cli.replay import parse_replay_args, replay
from tailreplay.studies.replay_args import ReplayArgs

OTLP_FLAGS = {"otlp_endpoint", "otlp_protocol", "otlp_headers", "otlp_ca", "otlp_cert",
              "otlp_key", "otlp_insecure", "otlp_timeout", "resource_attrs", "trace_sample",
              "otlp_capture_content", "gen_ai_provider"}  # fmt: skip


def test_a_field_for_every_option_of_the_command() -> None:
    params = {p.name for p in replay.params if p.expose_value} - OTLP_FLAGS | {"otlp"}
    assert {f.name for f in fields(ReplayArgs)} == params


def test_the_defaults_are_the_commands() -> None:
    assert parse_replay_args(["a.msgpack"]) == ReplayArgs(archives=(Path("a.msgpack"),))
    assert ReplayArgs(archives=(Path("a.msgpack"),)).to_argv() == ["a.msgpack"]


def _every_option(tmp_path: Path) -> list[str]:
    """A value other than the default for every option."""
    pem = tmp_path / "x.pem"
    pem.write_text("not read here")
    return [
        "--target", "http://127.0.0.1:9/v1", "--speed", "1x,2x@30s", "--amplify", "1.5x",
        "--no-spread-ticks", "--tick-placement", "even", "--tail-stretch", "1.6",
        "--tail-quantile", "0.95",
        "--tail-cost", "input=0.05,output=8", "--max-context", "8192", "--no-force-lengths",
        "--header", "Authorization: Bearer x", "--header", "X-A: b", "--model-map", "a=b",
        "--body-set", "temperature=0", "--body-set", "user=replay", "--body-drop", "tools",
        "--max-inflight", "64", "--connections", "0", "--timeout", "30s", "--limit", "10",
        "--from", "+1m", "--to", "+2m", "--out", str(tmp_path / "r.msgpack"), "--overwrite",
        "--json", str(tmp_path / "s.json"), "--shard", "1/4", "--start-at", "1700000000.5",
        "--allow-upstream", "--new-trace-ids", "--dry-run", "--offline", "--seed", "7",
        "--sim-profile", "default", "--sim-arg=--max-num-seqs=8", "--skip-corrupt",
        "--scrape", "target@2s", "--users", "4,8@1m", "--think", "recorded",
        "--retries", "policy", "--max-attempts", "5", "--client-aborts", "off",
        "--metrics-listen", "127.0.0.1:0", "--metrics-linger", "2s", "--lag-limit", "10ms",
        "--no-preflight", "--fail-fast", "0", "--duration", "5m",
        "--report", str(tmp_path / "r.html"), "--slo", "latency:p99<=2x*10,error_rate<=1%",
        "--slo-min-score", "0.5", "--slo-by", "model", "--slo-window", "1m",
        "--slo-stop", "now", "--no-slo-report", "--workers", "2", "--event-loop", "auto",
        "--otlp-endpoint", "http://127.0.0.1:4318", "--otlp-protocol", "http/protobuf",
        "--otlp-header", "authorization=Bearer y", "--otlp-ca", str(pem),
        "--otlp-cert", str(pem), "--otlp-key", str(pem), "--otlp-insecure",
        "--otlp-timeout", "7s", "--resource", "deployment.environment=staging",
        "--trace-sample", "0.5", "--otlp-capture-content", "--gen-ai-provider", "vllm",
        "a.msgpack", "b.msgpack",
    ]  # fmt: skip


def test_every_option_goes_back_to_the_same_value(tmp_path: Path) -> None:
    args = parse_replay_args(_every_option(tmp_path))
    default = ReplayArgs()
    unchanged = [f.name for f in fields(ReplayArgs) if getattr(args, f.name) == getattr(
        default, f.name)]  # fmt: skip
    assert not unchanged  # the sample sets every option
    assert parse_replay_args(args.to_argv()) == args


@pytest.mark.parametrize("think", ["recorded", "0.25s"])
def test_one_option_writes_one_flag(think: str) -> None:
    args = parse_replay_args(["--think", think, "peak.msgpack"])
    assert args.to_argv() == ["--think", "recorded" if think == "recorded" else "0.25s",
                              "peak.msgpack"]  # fmt: skip


def test_a_path_that_looks_like_a_flag_stays_an_archive() -> None:
    args = ReplayArgs(archives=(Path("-odd.msgpack"),))
    assert parse_replay_args(args.to_argv()).archives == (Path("-odd.msgpack"),)
