"""``tailreplay report`` as a library call: load both sides, compare, check SLOs, write;
a replay cut short says so first (``cut_short``).

>>> result = write_report(ReportOptions(replayed=[Path("replays/r.msgpack")]))
>>> result.slo["passed"]
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tailreplay.errors import UsageError
from tailreplay.output_path import check_output_file, write_output
from tailreplay.private import open_private
from tailreplay.report.compare import compare
from tailreplay.report.deltas import DELTA_COLUMNS, delta_rows
from tailreplay.report.engine_findings import engine_report
from tailreplay.report.model import Partial, Report, Shadow, SloMatrix, SloVerdict
from tailreplay.report.request_keys import KeyIndex
from tailreplay.report.run_table import run_table
from tailreplay.report.shadow_report import shadow_of_capture, shadow_sides
from tailreplay.report.shards import check_one_run, missing_shards
from tailreplay.report.side import Side, load_side
from tailreplay.report.slo import Objective, check, check_judgeable
from tailreplay.report.tables import ReportTable, headline, report_tables
from tailreplay.report.verdict import fail_on_verdict, judge
from tailreplay.traces.results.stats import DEFAULT_BUCKETS

__all__ = [
    "ReportOptions",
    "ReportResult",
    "cut_short",
    "fail_on_slo",
    "partial_line",
    "write_report",
]


@dataclass
class ReportOptions:
    replayed: Sequence[Path]
    recorded: Sequence[Path] | None = None
    """None: the archives the replay's header names (when they are still there)."""
    objectives: Sequence[Objective] = ()
    min_score: float = 1.0
    buckets: Sequence[int] = DEFAULT_BUCKETS
    json_out: Path | None = None
    markdown_out: Path | None = None
    html_out: Path | None = None
    deltas_out: Path | None = None
    skip_corrupt: bool = False
    seed: int = 0
    slo_by: str | None = None
    """Judge the objectives per class of this field too (model, path, session, phase)."""
    slo_window_s: float | None = None
    """...and per window of this many seconds of the replay."""
    thresholds: dict[str, float] | None = None
    """The findings' thresholds on the target's metrics (None: ``engine.THRESHOLDS``)."""
    shadow: bool = False
    """``replayed`` is a capture made with ``proxy --shadow``: compare its shadow copies
    (as replayed) with the production requests they copied (as recorded)."""
    judge_partial: bool = False
    """Judge the SLO of a run cut short on the requests it sent (``--judge-partial``)."""
    slo_stop: str | None = None
    """The objective ``--slo-stop`` saw missed, when it stopped the run being reported:
    the verdict is that miss."""


@dataclass
class ReportResult:
    report: Report
    slo: SloMatrix | None
    """Also ``report["slo"]``; None without objectives."""
    headline: str
    tables: list[ReportTable] = field(default_factory=list)


def write_report(
    options: ReportOptions, say: Callable[[str], None] = lambda line: None
) -> ReportResult:
    """Build the report and write every requested file; ``say`` gets warnings."""
    recorded, replayed, shadow, unrelated = _sides(options, say)
    _check_outputs(
        options, [Path(p) for p in [*replayed.paths, *(recorded.paths if recorded else [])]]
    )
    report = compare(recorded, replayed, buckets=options.buckets, seed=options.seed)
    if shadow is not None:
        report["shadow"] = shadow
    elif any(shadow_of_capture([h])["target"] for h in replayed.headers):
        say("note: this capture holds shadow copies: report --shadow compares them with production")
    if (missing := missing_shards(replayed.headers)) is not None:
        report["warnings"].insert(0, missing)
    if (partial := cut_short(replayed)) is not None:
        report["partial"] = partial
        report["warnings"].insert(0, partial_line(partial))
    if unrelated and any(o.relative for o in options.objectives):
        report["unrelated"] = (
            "no replayed request comes from the recorded archive, so objectives relative "
            "to it compare two unrelated runs (was the recording replaced or sliced anew?)"
        )
    for line in report["warnings"]:
        say(f"warning: {line}")
    engine = engine_report(options.replayed, replayed, options.thresholds)
    if engine is not None:
        report["engine"] = engine
    slo = check(options.objectives, report, options.min_score) if options.objectives else None
    if slo is not None:
        _scoped(slo, options, recorded, replayed)
        report["slo"] = slo
        report["verdict"] = judge(
            report, slo, judge_partial=options.judge_partial, slo_stop=options.slo_stop
        )
    line = headline(report, slo)
    tables = [run_table(report), *report_tables(report, slo)]
    _write_files(options, report, line, tables)
    if options.deltas_out is not None:
        if recorded is None:
            raise UsageError("--deltas needs the recorded archive: pass --recorded")
        _write_deltas(options.deltas_out, recorded, replayed)
    return ReportResult(report, slo, line, tables)


def _check_outputs(options: ReportOptions, inputs: list[Path]) -> None:
    """Refuse, before anything is written, an output that is one of the archives read
    (from Python as from the command line: a report must not overwrite a capture)."""
    outputs = {
        "--json": options.json_out,
        "--markdown": options.markdown_out,
        "--html": options.html_out,
        "--deltas": options.deltas_out,
    }
    for flag, path in outputs.items():
        if path is not None:
            check_output_file(flag, path, inputs=inputs)


def _write_files(
    options: ReportOptions, report: Report, line: str, tables: list[ReportTable]
) -> None:
    """The report as JSON, Markdown and HTML, each where asked."""
    if options.json_out is not None:
        write_output(options.json_out, json.dumps(report, indent=1) + "\n")
    if options.markdown_out is not None:
        from tailreplay.report.markdown import markdown

        with open_private(options.markdown_out) as f:
            f.write(markdown(line, tables, report["warnings"]))
    if options.html_out is not None:
        from tailreplay.report.html import html_report

        with open_private(options.html_out) as f:
            f.write(html_report(line, tables, report))


def _scoped(slo: SloMatrix, options: ReportOptions, recorded: Side | None, replayed: Side) -> None:
    """``--slo-by`` and ``--slo-window``: their scopes added to ``slo``, and its verdict
    failed when one of them failed."""
    from tailreplay.report.slo_scopes import by_class, by_window

    scopes = []
    if options.slo_by is not None:
        scopes.append(
            by_class(options.objectives, recorded, replayed, options.slo_by, options.seed)
        )
    if options.slo_window_s is not None:
        if not (math.isfinite(options.slo_window_s) and options.slo_window_s > 0):
            raise UsageError(f"--slo-window {options.slo_window_s!r}: a duration over 0")
        scopes.append(
            by_window(options.objectives, recorded, replayed, options.slo_window_s, options.seed)
        )
    if scopes:
        slo["scopes"] = scopes
        slo["passed"] = slo["passed"] and all(s["passed"] for s in scopes)


def slo_verdict(result: ReportResult) -> SloVerdict | None:
    """The SLO gate's verdict (``report/verdict.py``); None without objectives."""
    return result.report.get("verdict")


def fail_on_slo(result: ReportResult) -> None:
    """Raise unless the SLO gate passed: exit 1 when missed, 4 when not judged."""
    fail_on_verdict(slo_verdict(result))


def _sides(
    options: ReportOptions, say: Callable[[str], None]
) -> tuple[Side | None, Side, Shadow | None, bool]:
    """The recorded side (when there is one to compare with) and the replayed one; with
    ``--shadow``, production and the shadow's copies, and what the capture says of it;
    and whether the replay came from recorded requests none of which are in the
    recorded side (a recording replaced since, or another one)."""
    classes = [options.slo_by] if options.slo_by else []
    if options.deltas_out is not None:
        classes.append("model")  # the deltas' model column; no other figure reads it
    if options.shadow:
        if options.recorded:
            raise UsageError("--shadow compares a capture with itself: give no --recorded")
        return (
            *shadow_sides(options.replayed, options.skip_corrupt, classes, options.objectives),
            False,
        )
    replayed = load_side(options.replayed, skip_corrupt=options.skip_corrupt, classes=classes)
    check_one_run(replayed.paths, replayed.headers)
    recorded_paths = options.recorded
    if recorded_paths is None:
        recorded_paths = _recorded_from_header(replayed, say)
    recorded = None
    unrelated = False
    if recorded_paths:
        # A relative objective the recording cannot judge is refused, as replay refuses
        # it before sending: one exit code (2) for it in every command.
        check_judgeable(options.objectives, recorded_paths, skip_corrupt=options.skip_corrupt)
        recorded, unrelated = _load_recorded(
            recorded_paths, replayed, options.skip_corrupt, say, classes
        )
    if recorded is None and any(o.relative for o in options.objectives):
        raise UsageError(
            "an --slo relative to the recording (like 1.2x) needs the recorded archive: "
            "pass --recorded"
        )
    return recorded, replayed, None, unrelated


def _recorded_from_header(replayed: Side, say: Callable[[str], None]) -> list[Path]:
    named = [Path(p) for r in replayed.replays for p in r.archives]
    named = list(dict.fromkeys(named))
    if not named and replayed.is_replay:
        say("note: the replay's header names no recorded archive; pass --recorded to compare")
    missing = [p for p in named if not p.exists()]
    if missing:
        say(
            f"warning: the recorded archive {missing[0]} is gone; reporting the replay "
            "alone (pass --recorded to compare)"
        )
        return []
    return named


def _load_recorded(
    paths: Sequence[Path],
    replayed: Side,
    skip_corrupt: bool,
    say: Callable[[str], None],
    classes: Sequence[str],
) -> tuple[Side, bool]:
    """The recorded requests the replay sent (a --limit, window or shard sent a part),
    and whether none of the requests it replayed is in ``paths``.

    Compared whole, a replay of the first 400 requests would face the percentiles of
    all 2,400. A replay of something else (nothing joins) is compared with all of it.
    """
    # The calls that generate nothing were replayed too: their originals are read apart.
    keys = np.concatenate([replayed.key[replayed.keyed], replayed.idle.keys])
    if keys.size:
        keep = KeyIndex(keys)
        recorded = load_side(paths, skip_corrupt=skip_corrupt, keep=keep, classes=classes)
        if recorded.n:
            return recorded, False
        say("warning: no replayed request comes from the recorded archive; comparing them whole")
    return load_side(paths, skip_corrupt=skip_corrupt, classes=classes), bool(keys.size)


def _write_deltas(path: Path, recorded: Side, replayed: Side) -> None:
    with open_private(path, newline="") as f:
        out = csv.writer(f)
        out.writerow(DELTA_COLUMNS)
        out.writerows(delta_rows(recorded, replayed))


def cut_short(side: Side) -> Partial | None:
    """How much of the schedule the replayed side holds, when it holds less than all;
    None when whole, or when no header says what the whole was.

    A result archive whose header says how many requests the schedule held
    (``ReplayHeader.scheduled``) and that holds fewer due requests was cut short — by
    Ctrl-C, ``--fail-fast`` or ``--slo-stop``. Its figures are of the requests sent,
    which are not the recorded load: every view says so first (a warning, the
    headline), and an SLO on it is not judged unless the user asks for it (``report
    --judge-partial``; ``report/verdict.py``)."""
    if not side.is_replay or not side.headers:
        return None
    schedules = [r.scheduled for r in side.replays]
    if any(s is None for s in schedules):
        return None  # a shard, a --duration cut, a closed loop, an older file
    scheduled = sum(s for s in schedules if s is not None)
    # First attempts: what was due (a retry is another attempt at one of them; a
    # request never sent for want of a slot is a result too, "dropped").
    due = int((~side.retry).sum()) + sum(p.requests for p in side.idle.paths.values())
    if due >= scheduled:
        return None
    return {"scheduled": scheduled, "due": due, "unsent": scheduled - due}


def partial_line(partial: Partial) -> str:
    return (
        f"partial run: {partial['unsent']:,} of {partial['scheduled']:,} scheduled requests "
        "were never sent (interrupted or stopped); the figures are of the "
        f"{partial['due']:,} due before it stopped"
    )
