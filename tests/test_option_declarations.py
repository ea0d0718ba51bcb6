"""Every command's click options are its typed declaration (``tailreplay/declared.py``):
a parameter for each declared field and none besides (but the option sets named
here), each with the declared flags, type, default, range and help; and the field's
default is what the real parser gives when the option is left out."""

from __future__ import annotations

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
from tailreplay.sim.settings import SimArgs
from tailreplay.studies.capacity_args import CapacityArgs
from tailreplay.studies.model_check_args import ValidateModelArgs
from tailreplay.studies.replay_args import ReplayArgs

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


_FACTS = ("name", "min", "max", "min_open", "max_open", "choices", "exists", "file_okay",
          "dir_okay", "path_type", "text")  # fmt: skip


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


def test_a_configs_defaults_are_its_options() -> None:
    from tailreplay.proxy.config import ProxyConfig
    from tailreplay.proxy.shadow import ShadowConfig

    config = ProxyConfig(upstream=URL("http://127.0.0.1:9"))
    options, shadow = ProxyOptions(upstream=config.upstream), ShadowOptions()
    assert (config.listen_host, config.listen_port) == options.listen
    assert (config.timeout_s, config.rotate_bytes, config.shed_after_s) == (
        options.timeout, options.rotate_size, options.shed_after)  # fmt: skip
    copy = ShadowConfig(url=config.upstream)
    assert (copy.share, copy.max_inflight, copy.max_time_s) == (
        shadow.shadow_share, shadow.shadow_max_inflight, shadow.shadow_max_time)  # fmt: skip
