"""The click options of a command, generated from its typed options: every declared
field of the dataclass (``tailreplay/declared.py``) becomes one click parameter, in
the fields' order, named as the field, with the declared flags, type, default, range
and help. A command takes the parsed values back as that dataclass (``take``)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tailreplay.declared import Choice, PathKind, Setting, Text, declarations
from tailreplay.errors import InputError

__all__ = [
    "ChoiceOrFile",
    "FiniteRange",
    "InputPath",
    "Parsed",
    "click_param",
    "click_type",
    "declared_options",
    "param_flag",
    "take",
]

F = TypeVar("F", bound=Callable[..., Any])
D = TypeVar("D")


if TYPE_CHECKING:
    _ParamType = click.ParamType[Any, Any]  # generic since click 8.5
else:
    _ParamType = click.ParamType


class Parsed(_ParamType):
    """A click type over one of tailreplay's parsers, called as ``parse(text, flag)``."""

    def __init__(self, name: str, parse: Callable[[str, str], Any]) -> None:
        self.name = name
        self._parse = parse
        self.text = Text(name, parse)
        """The neutral declaration of the same reading (``tailreplay/declared.py``)."""

    @classmethod
    def of(cls, text: Text) -> Parsed:
        """The click type of a declared reading."""
        return cls(text.name, text.parse)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default already of the parsed type
        try:
            return self._parse(value, param_flag(param))
        except ValueError as exc:  # a parser's own words, as one usage line
            self.fail(str(exc), param, ctx)


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that also refuses nan and inf (which compare false to any bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number.", param, ctx)
        return number


def param_flag(param: click.Parameter | None) -> str:
    """The flag a message names for ``param``."""
    if param is None:
        return "value"
    return param.opts[0] if param.opts else f"<{param.name}>"


class ChoiceOrFile(click.Choice):  # type: ignore[type-arg]  # generic since click 8.5
    """One of the choices, or the path of an existing file (``Choice(files=True)``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str) or value in self.choices:
            return super().convert(value, param, ctx)
        if os.path.isfile(value):
            return value
        known = ", ".join(repr(c) for c in self.choices)
        where = "no such file" if not os.path.exists(value) else "not a regular file"
        self.fail(f"{value!r} is not one of {known}, nor a file ({where})", param, ctx)


class InputPath(click.Path):
    """A path the command reads (``PathKind.read``): a folder where a file is read, or
    a missing one that must exist, ends the command as unreadable input does (exit 3,
    README), in the words the readers use."""

    def __init__(self, *, exists: bool = False, dir_okay: bool = False) -> None:
        super().__init__(path_type=Path, exists=exists, dir_okay=dir_okay)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (str, os.PathLike)):
            if not self.dir_okay and os.path.isdir(value):
                raise InputError(f"{os.fsdecode(value)}: a folder, not a file")
            if self.exists and not os.path.exists(value):
                raise InputError(f"{os.fsdecode(value)}: no such file")
        return super().convert(value, param, ctx)


def click_type(setting: Setting[Any]) -> Any:
    """The click type that reads ``setting``'s values (None: click's text, or its
    boolean for a flag)."""
    kind = setting.kind
    if isinstance(kind, Text):
        return Parsed.of(kind)
    if isinstance(kind, Choice):
        return ChoiceOrFile(kind.choices) if kind.files else click.Choice(kind.choices)
    if isinstance(kind, PathKind) and kind.read:
        return InputPath(exists=kind.exists, dir_okay=kind.dir_okay)
    if isinstance(kind, PathKind):
        return click.Path(
            path_type=Path, exists=kind.exists, file_okay=kind.file_okay, dir_okay=kind.dir_okay
        )
    if kind is int:
        if not setting.has_range:
            return click.INT
        low, high = (None if b is None else int(b) for b in (setting.low, setting.high))
        return click.IntRange(low, high, min_open=setting.low_open, max_open=setting.high_open)
    if kind is float and not setting.has_range:
        return click.FLOAT
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
            nargs=-1 if setting.multiple else 1,
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
    # Else click's own: no value, or a flag's False. A boolean pair's None (neither flag
    # given) is said, as click would make it False.
    given = setting.default is not None and not (setting.is_flag and setting.default is False)
    if given or setting.off is not None:
        extra["default"] = setting.default
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


def declared_options(cls: type, *, unless: str | None = None) -> Callable[[F], F]:
    """Every declared field of ``cls`` as a click parameter, in the fields' order
    (``unless``: but those whose metadata holds this key)."""

    def decorate(f: F) -> F:
        for name, setting in reversed(declarations(cls, unless=unless)):
            f = click_param(setting.name or name, setting)(f)
        return f

    return decorate


def take(cls: Callable[..., D], options: dict[str, Any]) -> D:
    """``cls`` built from the values of its declared fields, taken out of a command's
    keyword arguments (what is left is the command's other options); a field the
    command does not take keeps its default."""
    found = declarations(cls)  # type: ignore[arg-type]
    names = {field: setting.name or field for field, setting in found}
    return cls(**{field: options.pop(name) for field, name in names.items() if name in options})
