"""An option declared once: its flags, how its text is read, its default as a user
types it, its range and its help (``Setting``), attached to the field of a command's
typed options (``declared``).

A command's options are a dataclass whose fields are declared here; the command line
generates its click options from those fields (``tailreplay/cli/option_fields.py``), in
the fields' order, and a field's default is the declared default read as a given
value is (``Setting.value``). Nothing here imports click: the packages below the
command line read the same declarations for their own defaults (``default_of``).

>>> wait: float = declared(Setting("--wait", "90s", "How long to wait.", kind=DURATION))
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from tailreplay.errors import UsageError

__all__ = [
    "Choice",
    "Kind",
    "PathKind",
    "Setting",
    "Text",
    "declarations",
    "declared",
    "default_of",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Text:
    """A value read by ``parse(text, flag)``, which raises ``ValueError`` (a
    ``UsageError`` is one) with the reason; ``name`` is what help shows for it."""

    name: str
    parse: Callable[[str, str], Any]


@dataclass(frozen=True)
class Choice:
    """One of ``choices``, as typed; with ``files``, or the path of an existing file
    (``sim --profile``: a built-in profile's name, or a profile's JSON file)."""

    choices: tuple[str, ...]
    files: bool = False


@dataclass(frozen=True)
class PathKind:
    """A path; ``exists``: it must exist when given; a file or folder as allowed."""

    exists: bool = False
    file_okay: bool = True
    dir_okay: bool = True
    read: bool = False
    """The command reads it: one missing (``exists``) or a folder where a file is read
    is unreadable input (exit 3), as a file that cannot be opened is; not a wrong flag."""


Kind = Text | Choice | PathKind | type[int] | type[float] | type[str]
"""How an option's text is read. ``int`` and ``float`` with a range (``Setting.low``,
``Setting.high``) are held to it."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One option as every command that takes it declares it.

    ``default`` is what the command gets when the option is left out, written as a user
    would type it (``"90s"``) or as the value itself (``2.5``); None: no value.
    """

    flag: str
    """The flag errors name (``--out``); an argument's name (``archives``)."""
    default: T
    help: str | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    """The range excludes ``low`` itself."""
    high_open: bool = False
    kind: Kind | None = None
    """None: text as typed (a number's range makes it a ``float``)."""
    short: str | None = None
    """A one-letter flag before ``flag`` (``-o``)."""
    aliases: tuple[str, ...] = ()
    """More flags after ``flag`` (``--output``)."""
    off: str | None = None
    """A boolean pair's flag that sets it false (``--no-compress``)."""
    is_flag: bool = False
    """Takes no value: given, the option is ``flag_value``."""
    flag_value: Any = True
    multiple: bool = False
    """Repeatable: the command gets a tuple of the values."""
    hidden: bool = False
    required: bool = False
    argument: bool = False
    """A positional argument, not an option (with ``multiple``: one or more, a tuple)."""
    show_default: bool | str = False
    """Help shows the default (True), or this text as the default."""
    metavar: str | None = None
    finish: Callable[[Any], Any] | None = None
    """Turns the read value (a tuple when ``multiple``) into what the command gets."""
    name: str | None = None
    """The command line's name for the value when it is not the field's: a field of an
    option set several commands take, whose name one of their own options has."""

    @property
    def flags(self) -> tuple[str, ...]:
        """Every flag, as help lists them."""
        return (*([self.short] if self.short else []), self.flag, *self.aliases)

    def value(self) -> Any:
        """The default as the command gets it: read as a given value is."""
        if self.multiple:
            given: Any = self.default or ()
            raw: Any = tuple(self.read(v) for v in given)
        else:
            raw = None if self.default is None else self.read(self.default)
        return raw if self.finish is None else self.finish(raw)

    def read(self, text: Any) -> Any:
        """One value as the command line reads it (a value already read is kept)."""
        if not isinstance(text, str):
            return text
        kind = self.kind
        if isinstance(kind, Text):
            return kind.parse(text, self.flag)
        if isinstance(kind, PathKind):
            return Path(text)
        if kind is int or kind is float:
            return kind(text)
        if kind is None and self.has_range:
            return float(text)
        return text

    @property
    def has_range(self) -> bool:
        return self.low is not None or self.high is not None

    def admits(self, value: float) -> bool:
        """Whether ``value`` is finite and in the range."""
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (
            self.high is not None and (value > self.high or (self.high_open and value == self.high))
        )

    def refuse_outside(self, value: float) -> None:
        """Raise ``UsageError`` (exit 2) naming the flag and its range when ``value`` is
        outside it: how a config built from Python meets the command line's check."""
        if not self.admits(value):
            raise UsageError(f"{self.flag} {value!r}: must be {self.range_text()}")

    def range_text(self) -> str:
        """The range as an error or a check names it: ``1..4``, ``0<x<1``."""
        low = "" if self.low is None else f"{self.low:g}{'<' if self.low_open else '<='}"
        high = "" if self.high is None else f"{'<' if self.high_open else '<='}{self.high:g}"
        return f"{low}x{high}"


_SETTING = "setting"


def declared(setting: Setting[Any], **metadata: Any) -> Any:
    """A dataclass field that is ``setting``'s option, defaulting to its value; a
    required option (not an argument) has no default. ``metadata`` is kept beside it."""
    kept = {_SETTING: setting, **metadata}
    if setting.required and not setting.argument:
        return field(metadata=kept)
    return field(default_factory=setting.value, metadata=kept)


def declarations(cls: type, *, unless: str | None = None) -> list[tuple[str, Setting[Any]]]:
    """The declared fields of the dataclass ``cls``, in order: (field name, setting);
    ``unless``: not those whose metadata holds this key."""
    return [
        (f.name, f.metadata[_SETTING])
        for f in fields(cls)
        if _SETTING in f.metadata and (unless is None or unless not in f.metadata)
    ]


def default_of(cls: type, name: str) -> Any:
    """The default of ``cls``'s declared field ``name``: what a config that the field
    sets defaults to (a wrong name fails on import)."""
    for f in fields(cls):
        if f.name == name and _SETTING in f.metadata:
            assert f.default_factory is not MISSING, f"{name} has no default"
            return f.default_factory()
    raise KeyError(f"{cls.__name__} declares no {name}")
