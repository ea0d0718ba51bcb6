"""Whole-archive operations behind ``traces merge``, ``slice``, ``peak`` and ``upgrade``.

Each streams: records go from an ``ArchiveReader`` to an ``ArchiveWriter`` one at a
time, so memory does not grow with the archive (``peak`` loads two columns first to
find the window).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tailreplay.errors import InputError, UsageError
from tailreplay.output_path import check_output_file
from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.capture_header import raw as raw_capture
from tailreplay.traces.archive.capture_header import shadows_named
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.format import VERSION, make_header
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.replay_header import ReplayHeader
from tailreplay.units import parse_time
from tailreplay.version import __version__

__all__ = [
    "OpResult",
    "Peak",
    "Stop",
    "Upgraded",
    "copy_records",
    "find_peak",
    "record_filter",
    "stop_at",
    "time_window",
    "upgrade_archive",
]

Filter = Callable[[dict[str, Any]], bool]
STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx", "error")


@dataclass
class OpResult:
    written: int
    read: int
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Stop:
    """Where a copy may stop reading: at the first record starting at or after
    ``at_ns`` once the ``before`` records that start earlier (counted over the
    columns) have all been read. The stream is in time order but for records out of
    order beyond the re-ordering window: one moved an hour later must not end the
    copy before the records that follow it."""

    at_ns: int
    before: int


@dataclass
class Peak:
    start_ns: int
    end_ns: int
    requests: int
    tokens: int
    stop: Stop
    """Where copying the window may stop reading."""


def one_run(headers: list[dict[str, Any]], warnings: list[str]) -> dict[str, Any] | None:
    """The replay settings a merge of result files keeps: those of the run when every
    input is a shard of one run (its schedule, shard count and common start
    ``start_at_ns`` agree), as one unsharded result; else none (with a warning when
    they are replay results of different runs)."""
    runs = [ReplayHeader.read(h) for h in headers if h]
    if not runs or any(r.speed is None for r in runs):
        return None  # captures, or not every file a replay's result
    for other in runs[1:]:
        differs = runs[0].differs_from(other)
        if differs is not None:
            name, mine, theirs = differs
            warnings.append(
                f"the inputs are results of different runs ({name}: {mine!r} and {theirs!r}); "
                "the merged header keeps no replay settings"
            )
            return None
    return replace(runs[0], shard=(0, 1)).to_map()


def _one_shadow(headers: list[dict[str, Any]]) -> None:
    """Refuse captures that copied to different shadows, or at different shares, or
    not at all beside ones that did: the one header written would name one shadow
    for all their copies."""
    if len(named := shadows_named(headers)) > 1:
        raise UsageError(
            f"the inputs copied to different shadows or shares ({', '.join(named)}): one "
            "archive would name one shadow for all their copies; keep each apart"
        )


def copy_records(
    inputs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    source: str,
    keep: Filter | None = None,
    skip_corrupt: bool = False,
    stop: Stop | None = None,
    extra_header: dict[str, Any] | None = None,
) -> OpResult:
    """Write the records of ``inputs`` that ``keep`` accepts to ``out``, in time order.

    ``stop`` ends reading where nothing later can match (``keep`` refuses every record
    from ``stop.at_ns`` on); ``read`` counts the records before it.
    """
    in_paths = [Path(p) for p in inputs]
    out_path = Path(out)
    check_output_file("-o", out_path, inputs=in_paths)
    # Shadow copies too: an archive copied (a window, shards joined) stays whole.
    reader = ArchiveReader(in_paths, skip_corrupt=skip_corrupt, shadows="keep")
    first = next((h for h in reader.headers if h), {})  # an empty file has none
    _one_shadow(reader.headers)
    notes: list[str] = []
    if extra_header is None and source == "merge":
        extra_header = one_run(reader.headers, notes)
    header = make_header(
        source,
        upstream=first.get("upstream"),
        capture=raw_capture(first),
        ordered=True,
        extra={"inputs": [p.name for p in in_paths], **(extra_header or {})},
    )
    read = 0

    def kept() -> Iterator[dict[str, Any]]:
        nonlocal read
        for m in reader.iter_maps():
            if stop is not None and m["start_ns"] >= stop.at_ns:
                if read >= stop.before:
                    break
                continue  # out of order: a record before the stop is still to come
            read += 1
            if keep is None or keep(m):
                yield m

    written = write_archive(out_path, header, kept(), checked=True)  # the reader checked them
    return OpResult(written=written, read=read, warnings=notes + reader.warnings())


def record_filter(
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    path_glob: str | None = None,
    model: str | None = None,
    status: str | None = None,
) -> Filter:
    """A predicate over record maps; every given condition must hold.

    ``status`` is a class: ``2xx``..``5xx`` by HTTP status, ``error`` for records
    whose exchange failed without a usable response (``error`` set).
    """
    if status is not None and status not in STATUS_CLASSES:
        raise UsageError(f"invalid --status {status!r}: use one of {', '.join(STATUS_CLASSES)}")
    checks: list[Filter] = []
    if start_ns is not None:
        checks.append(lambda m: m["start_ns"] >= start_ns)
    if end_ns is not None:
        checks.append(lambda m: m["start_ns"] < end_ns)
    if path_glob is not None:
        checks.append(lambda m: fnmatch.fnmatchcase(m.get("path") or "", path_glob))
    if model is not None:
        checks.append(lambda m: m.get("model") == model)
    if status == "error":
        checks.append(lambda m: m.get("error") is not None)
    elif status is not None:
        hundreds = int(status[0])
        checks.append(lambda m: (m.get("status") or 0) // 100 == hundreds)
    return lambda m: all(check(m) for check in checks)


def find_peak(
    paths: Iterable[str | os.PathLike[str]],
    window_ns: int,
    *,
    by: str = "requests",
    skip_corrupt: bool = False,
) -> Peak:
    """The window of length ``window_ns`` holding the most requests (or tokens).

    Windows start at a record's start time; the earliest of equal windows wins.
    """
    if by not in ("requests", "tokens"):
        raise UsageError(f"invalid --by {by!r}: use requests or tokens")
    if window_ns <= 0:
        raise UsageError("--window must be positive")
    cols = load_columns(paths, ["input_tokens", "output_tokens"], skip_corrupt=skip_corrupt)
    if cols.n == 0:
        raise InputError("the archive holds no records")
    starts = cols["start_ns"]
    tokens = cols["input_tokens"] + cols["output_tokens"]
    weights = np.ones(cols.n, dtype=np.int64) if by == "requests" else tokens
    cum = np.concatenate(([0], np.cumsum(weights)))
    ends = np.searchsorted(starts, starts + window_ns, side="left")
    sums = cum[ends] - cum[np.arange(cols.n)]
    best = int(np.argmax(sums))
    end = int(ends[best])  # the starts are sorted: the records before the window's end
    end_ns = int(starts[best]) + window_ns
    return Peak(
        start_ns=int(starts[best]),
        end_ns=end_ns,
        requests=end - best,
        tokens=int(tokens[best:end].sum()),
        stop=Stop(end_ns, end),
    )


def stop_at(
    paths: Sequence[str | os.PathLike[str]], at_ns: int | None, *, skip_corrupt: bool = False
) -> Stop | None:
    """Where a copy of the records before ``at_ns`` may stop reading (one pass over
    the start times, through the column scanner); None for no end."""
    if at_ns is None:
        return None
    starts = load_columns(paths, [], skip_corrupt=skip_corrupt)["start_ns"]
    return Stop(at_ns, int(np.searchsorted(starts, at_ns, side="left")))


def time_window(
    files: Sequence[Path], from_: str | None, to: str | None, *, skip_corrupt: bool = False
) -> tuple[int | None, int | None]:
    """``--from``/``--to`` as unix ns; ``+DURATION`` counts from the archives' first record."""
    from_, to = (t if t and t.strip() else None for t in (from_, to))  # empty: not given
    origin = None
    if any(t is not None and t.strip().startswith("+") for t in (from_, to)):
        cols = load_columns(files, [], skip_corrupt=skip_corrupt)
        if cols.n == 0:
            raise UsageError("relative --from/--to given, but the archive holds no records")
        origin = int(cols["start_ns"][0])
    return (
        parse_time(from_, origin_ns=origin) if from_ is not None else None,
        parse_time(to, origin_ns=origin) if to is not None else None,
    )


@dataclass
class Upgraded:
    """What ``upgrade_archive`` wrote: records, the version they came from, warnings."""

    written: int
    from_version: int
    warnings: list[str] = field(default_factory=list)


def upgrade_archive(
    src: str | os.PathLike[str], out: str | os.PathLike[str], *, skip_corrupt: bool = False
) -> Upgraded:
    """Rewrite the archive ``src`` as ``out`` in the current format version (with
    checksums: ``traces/archive/checksums.py``): ``traces upgrade``.

    Records go across unchanged and in the order they are stored (through
    ``format.UPGRADES`` when their version changed them); the header keeps its fields
    but for ``version``, ``tool_version`` and ``created_ns`` (the new file's own), and
    names the version it came from in ``upgraded_from``. The output is written beside
    its name and renamed into place at the end (``write_archive``), mode 0600.

    >>> upgrade_archive("old.msgpack", "new.msgpack").from_version
    1
    """
    in_path, out_path = Path(src), Path(out)
    check_output_file("-o", out_path, inputs=[in_path])
    reader = ArchiveReader([in_path], skip_corrupt=skip_corrupt, order="file", shadows="keep")
    header = dict(reader.headers[0])
    if not header:
        raise InputError(f"{in_path}: empty file: no header to upgrade, no records")
    version = header["version"]
    header.update(tool_version=__version__, version=VERSION)
    if version != VERSION:
        header["upgraded_from"] = version
    written = write_archive(out_path, header, reader.iter_maps(), checked=True)
    return Upgraded(written, version, reader.warnings())
