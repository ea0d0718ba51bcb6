"""Every command's click options are its typed declaration (``tailreplay/declared.py``):
a parameter for each declared field and none besides (but the option sets named
here), each with the declared flags, type, default, range and help; and the field's
default is what the real parser gives when the option is left out."""

from __future__ import annotations

import tokenize
from pathlib import Path
from token import NUMBER
from typing import Any

import click
import pytest
from yarl import URL

from tailreplay.cli import cli
from tailreplay.cli.deploy import JobArgs
from tailreplay.cli.option_fields import click_type
from tailreplay.cli.sim import PROFILE_OVERRIDES
from tailreplay.declared import Setting, declarations
from tailreplay.exporters.otlp_options import OtlpOptions
from tailreplay.proxy.settings import ProxyOptions, ShadowOptions
from tailreplay.replayer.config import ReplayConfig
from tailreplay.replayer.schedule import ScheduleConfig
from tailreplay.sim.settings import SimArgs
from tailreplay.studies.capacity_args import CapacityArgs
from tailreplay.studies.model_check_args import ValidateModelArgs
from tailreplay.studies.replay_args import ReplayArgs
from tests.helpers import REPO

PRODUCT = ("tailreplay", "traces", "proxy", "replayer", "exporters", "report", "sim")

COMMANDS: dict[str, tuple[list[type], set[str], list[str]]] = {
    # command: (its declared options, the option sets it takes besides, minimal argv)
    "proxy": ([ProxyOptions, ShadowOptions, OtlpOptions], set(), ["--upstream", "http://x:9"]),
    "replay": ([ReplayArgs, OtlpOptions], {"version"}, ["a.msgpack"]),
    "capacity": ([CapacityArgs], set(), ["a.msgpack", "--slo", "latency:p99<=1s"]),
    "deploy job": ([JobArgs], set(), ["/archives/a.msgpack", "--shards", "2"]),
    "traces validate-model": ([ValidateModelArgs], set(), ["a.msgpack", "--model", "m.json"]),
    "sim": ([SimArgs], {name for name, _ in PROFILE_OVERRIDES.values()}, []),
}


def _command(path: str) -> click.Command:
    command: click.Command = cli
    for name in path.split():
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def _declared(path: str) -> dict[str, Setting[Any]]:
    """The command's declared parameters, by the name click gives each."""
    classes, _, _ = COMMANDS[path]
    return {s.name or name: s for cls in classes for name, s in declarations(cls)}


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_a_parameter_for_every_declared_field_and_none_besides(path: str) -> None:
    _, sets, _ = COMMANDS[path]
    names = [p.name for p in _command(path).params]
    assert len(names) == len(set(names))
    assert set(names) - sets == set(_declared(path))


_FACTS = [
    "name",
    "min",
    "max",
    "min_open",
    "max_open",
    "choices",
    "exists",
    "file_okay",
    "dir_okay",
    "path_type",
    "text",
]


def _facts(kind: Any) -> tuple[Any, ...]:
    """What a click type reads and refuses, as comparable values."""
    return (type(kind), *(getattr(kind, a, None) for a in _FACTS))


def _same_type(param: click.Parameter, setting: Setting[Any]) -> bool:
    expected = click_type(setting)
    if expected is None:  # click's own: text, or a flag's boolean
        return param.type is click.STRING or isinstance(param.type, click.types.BoolParamType)
    return _facts(param.type) == _facts(expected)


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_each_parameter_is_its_declaration(path: str) -> None:
    params = {p.name: p for p in _command(path).params}
    for name, setting in _declared(path).items():
        param = params[name]
        assert _same_type(param, setting), name
        if isinstance(param, click.Argument):
            assert param.nargs == (-1 if setting.multiple else 1), name
        else:
            assert param.multiple == setting.multiple, name
        assert param.required == setting.required, name
        default = None if param.default is click.core.UNSET else param.default
        assert default == (None if setting.is_flag and not setting.default else setting.default)
        if isinstance(param, click.Argument):
            assert setting.argument, name
            continue
        assert isinstance(param, click.Option), name
        assert param.help == setting.help, name
        assert param.hidden == setting.hidden, name
        assert param.opts == list(setting.flags), name
        assert param.secondary_opts == ([setting.off] if setting.off else []), name
        if setting.has_range:
            assert isinstance(param.type, click.types._NumberRangeBase), name
            bounds = (param.type.min, param.type.max, param.type.min_open, param.type.max_open)
            assert bounds == (setting.low, setting.high, setting.low_open, setting.high_open)


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_a_fields_default_is_what_the_parser_gives(path: str) -> None:
    _, _, argv = COMMANDS[path]
    parsed = _command(path).make_context(path, list(argv)).params
    for name, setting in _declared(path).items():
        if not setting.argument and not set(setting.flags) & set(argv):
            assert parsed[name] == setting.value(), name


def _configs() -> list[tuple[str, object, object, dict[str, str]]]:
    """Each config beside the options that set it: (name, config, options, {config's
    field: option's field}), both at their defaults."""
    from tailreplay.proxy.config import ProxyConfig
    from tailreplay.proxy.shadow import ShadowConfig
    from tailreplay.sim.server import SimConfig
    from tailreplay.studies.capacity import CapacityStudy
    from tailreplay.studies.model_check import CheckConfig
    from tailreplay.traces.workload.workload_model import Workload

    url = URL("http://127.0.0.1:9")
    replay = ReplayArgs()
    return [
        (
            "proxy",
            ProxyConfig(upstream=url),
            ProxyOptions(upstream=url),
            {
                "out_dir": "out_dir",
                "prefix": "prefix",
                "rotate_bytes": "rotate_size",
                "rotate_interval_s": "rotate_interval",
                "compress": "compress",
                "bodies": "bodies",
                "sample": "sample",
                "inject_usage": "inject_usage",
                "max_body": "max_body",
                "timeout_s": "timeout",
                "idle_timeout_s": "idle_timeout",
                "body_timeout_s": "body_timeout",
                "drain_timeout_s": "drain_timeout",
                "workers": "workers",
                "shed_after_s": "shed_after",
            },
        ),
        (
            "shadow",
            ShadowConfig(url=url),
            ShadowOptions(),
            {
                "share": "shadow_share",
                "max_inflight": "shadow_max_inflight",
                "max_time_s": "shadow_max_time",
                "forward_auth": "shadow_forward_auth",
            },
        ),
        (
            "schedule",
            ScheduleConfig(paths=[]),
            replay,
            {
                "speed": "speed",
                "amplify": "amplify",
                "tail_stretch": "tail_stretch",
                "tail_quantile": "tail_quantile",
                "shard": "shard",
                "seed": "seed",
                "skip_corrupt": "skip_corrupt",
                "spread_ticks": "spread_ticks",
                "tick_placement": "tick_placement",
            },
        ),
        (
            "replay",
            ReplayConfig(schedule=ScheduleConfig(paths=[])),
            replay,
            {
                "force_lengths": "force_lengths",
                "max_inflight": "max_inflight",
                "connections": "connections",
                "timeout_s": "timeout",
                "metrics_linger_s": "metrics_linger",
                "preflight": "preflight",
                "fail_fast": "fail_fast",
                "think_s": "think",
                "event_loop": "event_loop",
            },
        ),
        (
            "capacity",
            CapacityStudy((), ()),
            CapacityArgs(slos=[]),
            {
                "sim_profile": "sim_profile",
                "by": "by",
                "window_s": "window",
                "min_factor": "min_factor",
                "max_factor": "max_factor",
                "precision": "precision",
                "repeats": "repeats",
                "drain_s": "drain",
                "tail_stretch": "tail_stretch",
                "lag_limit_s": "lag_limit",
                "out_dir": "out_dir",
            },
        ),
        (
            "validate-model",
            CheckConfig(Path(), Workload.__new__(Workload), Path()),
            ValidateModelArgs(archive=Path(), model_path=Path()),
            {
                "sim_profile": "sim_profile",
                "offset_s": "offset",
                "seeds": "seeds",
                "speed": "speed",
                "lag_limit_s": "lag_limit",
                "windows": "windows",
            },
        ),
        ("sim", SimConfig(), SimArgs(), {"seed": "seed"}),
    ]


def test_a_configs_defaults_are_its_options() -> None:
    for name, config, options, pairs in _configs():
        for ours, theirs in pairs.items():
            assert getattr(config, ours) == getattr(options, theirs), (name, ours)
    replay = ReplayConfig(schedule=ScheduleConfig(paths=[]))
    assert replay.lag_limit_ms == ReplayArgs().lag_limit * 1000
    assert replay.replay_aborts == (ReplayArgs().client_aborts == "replay")


def test_the_tail_stretch_default_is_written_once() -> None:
    """``1.8`` as a number in the product's code: the declaration alone."""
    found = []
    for folder in PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            with path.open("rb") as f:
                tokens = tokenize.tokenize(f.readline)
                found += [path.name for t in tokens if t.type == NUMBER and t.string == "1.8"]
    assert found == ["shared_options.py"]
