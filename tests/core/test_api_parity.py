"""The Python API has the command line's reach: ``api.replay`` reads every field of
``ReplayArgs`` (a field it never reads is an option it silently ignores), writes the
outputs the command writes, takes capture folders, and every type its signatures use
is importable from ``tailreplay.api``."""

from __future__ import annotations

import json
import sys
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from tailreplay import api
from tailreplay.errors import UsageError
from tests.helpers import chat_archive

FIELDS = frozenset(f.name for f in fields(api.ReplayArgs))
_NOT_USE = frozenset({"__eq__", "__repr__", "__hash__", "to_argv"})
"""Reads that are no use of the value: comparing, printing, writing back as argv."""


class _Watched(api.ReplayArgs):
    """``ReplayArgs`` that notes each field read by the code it is given to: a read by
    ``dataclasses`` (``replace`` copies every field) or by the dataclass's own methods is
    no use of the option, so it is not noted."""

    seen: typing.ClassVar[set[str]] = set()

    def __getattribute__(self, name: str) -> Any:
        if name in FIELDS:
            caller = sys._getframe(1)
            module = caller.f_globals.get("__name__")
            if module != "dataclasses" and caller.f_code.co_name not in _NOT_USE:
                _Watched.seen.add(name)
        return object.__getattribute__(self, name)


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    """A capture folder as the proxy leaves it: two archives."""
    folder = tmp_path / "capture"
    folder.mkdir()
    chat_archive(folder / "capture-1.msgpack", 15, gap_ms=10, seed=1)
    chat_archive(folder / "capture-2.msgpack", 15, gap_ms=10, seed=2)
    return folder


def test_a_replay_from_python_reads_every_option_and_writes_every_output(
    tmp_path: Path, capture: Path
) -> None:
    """Two runs between them read every field (``slo_report`` is read only when no
    ``report_out`` asks for the report anyway) and write every output."""
    _Watched.seen.clear()
    judged = _Watched(
        archives=(capture,),
        speed=api.speed("10x"),
        retries="policy",  # max_attempts is read with it
        slos=api.objectives("error_rate<=100%"),
        json_out=tmp_path / "summary.json",
        out=tmp_path / "results.msgpack",
        lag_limit=3600.0,  # behaviour, not timing: a busy machine's late sends are no verdict
    )
    run = api.replay(judged)
    reported = api.replay(
        _Watched(
            archives=(capture,),
            speed=api.speed("10x"),
            report_out=tmp_path / "r.html",
            lag_limit=3600.0,
        ),
        out=tmp_path / "reported.msgpack",
    )
    ignored = FIELDS - _Watched.seen
    assert not ignored, f"api.replay never reads {sorted(ignored)}"
    # The folder is read as its archives; each output is where it was asked for.
    assert run.results == tmp_path / "results.msgpack"
    assert sum(1 for _ in api.read(run.results)) == 30
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["requests"] == 30 and "slo" in summary
    assert run.judged is not None and summary["slo"]["passed"] is run.judged.passed is True
    assert run.exit_code == 0
    assert (tmp_path / "r.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert reported.judged is not None and reported.judged.missed == []


def test_two_names_for_the_results_are_refused(tmp_path: Path, capture: Path) -> None:
    args = api.ReplayArgs(archives=(capture,), dry_run=True, out=tmp_path / "a.msgpack")
    with pytest.raises(ValueError, match="two result files"):
        api.replay(args, out=tmp_path / "b.msgpack")
    assert api.replay(args, out=tmp_path / "a.msgpack").results == tmp_path / "a.msgpack"
    with pytest.raises(UsageError, match="exists; give another name, or --overwrite"):
        api.replay(args)
    again = api.replay(api.ReplayArgs(archives=(capture,), dry_run=True, out=args.out,
                                      overwrite=True, limit=4))  # fmt: skip
    assert sum(1 for _ in api.read(again.results)) == 4


def _named_types(hint: Any) -> typing.Iterator[type]:
    """The classes a type hint names (``X | None``, ``tuple[X, ...]``, ``list[X]``)."""
    if isinstance(hint, type) and not isinstance(hint, types.GenericAlias):
        yield hint
    for arg in typing.get_args(hint):
        yield from _named_types(arg)


@pytest.mark.parametrize("signature", [api.ReplayArgs, api.CapacityStudy, api.replay])
def test_every_type_a_signature_uses_is_exported(signature: Any) -> None:
    hints = typing.get_type_hints(signature)
    ours = {
        t
        for hint in hints.values()
        for t in _named_types(hint)
        if t.__module__.split(".")[0] in ("tailreplay", "yarl")
    }
    missing = sorted(t.__name__ for t in ours if getattr(api, t.__name__, None) is not t)
    assert not missing, f"tailreplay.api does not export {missing}"
    assert {t.__name__ for t in ours} <= set(api.__all__)


def test_literal_options_are_exported_as_their_aliases() -> None:
    assert typing.get_args(api.LoadBy) == ("speed", "amplify")
    assert api.URL("http://127.0.0.1:9/v1").port == 9
