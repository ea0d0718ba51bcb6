"""Options several commands share are declared once (``tailreplay/shared_options.py``):
every command's click option is that declaration, and a value is taken or refused
alike by ``replay``, ``capacity``, ``deploy job`` and the API."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tailreplay import api, shared_options
from tailreplay.cli import cli
from tailreplay.errors import UsageError
from tailreplay.shared_options import SPEED, TAIL_QUANTILE, TAIL_STRETCH, Setting
from tailreplay.studies.capacity import CapacityStudy, check_study
from tailreplay.studies.replay_args import ReplayArgs
from tests.helpers import REPO, chat_archive

SHARED = [TAIL_STRETCH, TAIL_QUANTILE, SPEED]
PRODUCT = ("tailreplay", "traces", "proxy", "replayer", "exporters", "report", "sim")


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out |= _commands(command, f"{prefix}{name} ")
        else:
            out[prefix + name] = command
    return out


def _option(command: click.Command, flag: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and flag in param.opts:
            return param
    return None


@pytest.mark.parametrize("setting", SHARED, ids=lambda s: s.flag)
def test_every_command_declares_a_shared_option_as_its_setting(setting: Setting[object]) -> None:
    takers = {}
    for name, command in _commands(cli).items():
        option = _option(command, setting.flag)
        if option is None or name == "traces validate-model":  # its --speed scales time
            continue
        takers[name] = option
        assert option.default == setting.default, name
        assert option.help == setting.help, name
        if setting.low is not None or setting.high is not None:
            assert isinstance(option.type, click.FloatRange), name
            assert (option.type.min, option.type.max) == (setting.low, setting.high), name
            assert (option.type.min_open, option.type.max_open) == (
                setting.low_open,
                setting.high_open,
            ), name
    assert "replay" in takers


def test_each_default_is_written_once() -> None:
    """No product module but the declarations spells a shared option's default beside
    its name (``tail_stretch: float = 1.8``, ``default=1.8``)."""
    found = []
    for folder in PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel == "tailreplay/shared_options.py":
                continue
            text = path.read_text()
            for name in ("tail_stretch", "tail_quantile"):
                if re.search(rf"{name}\s*:\s*float\s*=\s*[0-9]", text):
                    found.append(f"{rel}: {name}")
            if re.search(r'"--tail-(stretch|quantile)",\s*\n\s*type=', text):
                found.append(f"{rel}: a --tail option of its own")
    assert not found


@pytest.mark.parametrize(("value", "taken"), [("4", True), ("5", False), ("0.5", False)])
def test_a_tail_stretch_is_taken_or_refused_alike(tmp_path: Path, value: str, taken: bool) -> None:
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 10, gap_ms=20, seed=1)
    runner = CliRunner()
    out = tmp_path / "r.msgpack"
    replay = ["replay", "--dry-run", "--out", str(out), "--tail-stretch", value, str(archive)]
    deploy = ["deploy", "job", "--shards", "2", f"--replay-arg=--tail-stretch={value}"]
    codes = {
        "replay": runner.invoke(cli, replay).exit_code,
        "deploy job": runner.invoke(cli, [*deploy, "/archives/a.msgpack"]).exit_code,
    }
    capacity = [str(archive), "--slo", "latency:p99<=1s", "--tail-stretch", value]
    try:  # parsed only: a search would start replays
        cli.commands["capacity"].make_context("capacity", capacity)
        codes["capacity"] = 0
    except click.BadParameter as exc:
        assert "--tail-stretch" in exc.format_message()
        codes["capacity"] = 2
    assert codes == dict.fromkeys(codes, 0 if taken else 2)
    args = ReplayArgs(archives=(archive,), tail_stretch=float(value), dry_run=True)
    study = CapacityStudy(
        archives=(archive,),
        objectives=tuple(api.objectives("latency:p99<=1s")),
        tail_stretch=float(value),
        out_dir=tmp_path / "c",
    )
    if taken:
        api.replay(args, out=tmp_path / "api.msgpack")
        check_study(study)
        return
    for refused in (
        lambda: api.replay(args, out=tmp_path / "api.msgpack"),
        lambda: check_study(study),
    ):
        with pytest.raises(UsageError, match=rf"--tail-stretch {float(value)!r}: must be 1<=x<=4"):
            refused()


def test_the_declarations_are_the_modules_public_names() -> None:
    declared = {name for name, v in vars(shared_options).items() if isinstance(v, Setting)}
    assert declared == {"SPEED", "TAIL_STRETCH", "TAIL_QUANTILE", "TARGET", "SKIP_CORRUPT"}
    assert declared <= set(shared_options.__all__)
