"""The click options of a command, generated from its typed options: every declared
field of the dataclass (``tailreplay/declared.py``) becomes one click parameter, in
the fields' order, named as the field, with the declared flags, type, default, range
and help. A command takes the parsed values back as that dataclass (``take``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from tailreplay.cli.options import FiniteRange, Parsed
from tailreplay.declared import Choice, PathKind, Setting, Text, declarations

__all__ = ["click_param", "click_type", "declared_options", "take"]

F = TypeVar("F", bound=Callable[..., Any])
D = TypeVar("D")


def click_type(setting: Setting[Any]) -> Any:
    """The click type that reads ``setting``'s values (None: click's text, or its
    boolean for a flag)."""
    kind = setting.kind
    if isinstance(kind, Text):
        return Parsed.of(kind)
    if isinstance(kind, Choice):
        return click.Choice(kind.choices)
    if isinstance(kind, PathKind):
        return click.Path(
            path_type=Path, exists=kind.exists, file_okay=kind.file_okay, dir_okay=kind.dir_okay
        )
    if kind is int:
        if not setting.has_range:
            return click.INT
        low, high = (None if b is None else int(b) for b in (setting.low, setting.high))
        return click.IntRange(low, high, min_open=setting.low_open, max_open=setting.high_open)
    if kind is float or setting.has_range:
        return FiniteRange(
            setting.low, setting.high, min_open=setting.low_open, max_open=setting.high_open
        )
    return None


def _finish(setting: Setting[Any]) -> Callable[[click.Context, click.Parameter, Any], Any] | None:
    finish = setting.finish
    if finish is None:
        return None
    return lambda _ctx, _param, value: finish(value)


def click_param(name: str, setting: Setting[Any]) -> Callable[[F], F]:
    """The click option (or argument) ``setting`` declares, for the field ``name``."""
    if setting.argument:
        argument: Callable[[F], F] = click.argument(
            name,
            nargs=-1,
            required=setting.required,
            type=click_type(setting),
            callback=_finish(setting),
            metavar=setting.metavar,
        )
        return argument
    flags = list(setting.flags)
    if setting.off is not None:
        flags[-1] = f"{flags[-1]}/{setting.off}"
    extra: dict[str, Any] = {}
    if setting.default is not None and not (setting.is_flag and setting.default is False):
        extra["default"] = setting.default  # else click's own: no value, or a flag's False
    if setting.is_flag and setting.flag_value is True:
        extra["is_flag"] = True
    elif setting.is_flag:
        extra["flag_value"] = setting.flag_value
    else:
        extra["type"] = click_type(setting)
    option: Callable[[F], F] = click.option(
        *flags,
        name,
        help=setting.help,
        show_default=setting.show_default or None,
        multiple=setting.multiple,
        hidden=setting.hidden,
        required=setting.required,
        metavar=setting.metavar,
        callback=_finish(setting),
        **extra,
    )
    return option


def declared_options(cls: type) -> Callable[[F], F]:
    """Every declared field of ``cls`` as a click parameter, in the fields' order."""

    def decorate(f: F) -> F:
        for name, setting in reversed(declarations(cls)):
            f = click_param(name, setting)(f)
        return f

    return decorate


def take(cls: Callable[..., D], options: dict[str, Any]) -> D:
    """``cls`` built from the values of its declared fields, taken out of a command's
    keyword arguments (what is left is the command's other options)."""
    names = [name for name, _ in declarations(cls)]  # type: ignore[arg-type]
    return cls(**{name: options.pop(name) for name in names})
