"""tailreplay from Python: read and write archives, replay them, report and gate on SLOs
(a replay against its recording, or a shadow against production).

The same runs as the command line, with the same options (``ReplayArgs`` is
``tailreplay replay``'s options, typed) and the same figures, returned as types
instead of printed. Errors are ``tailreplay.errors.TailreplayError`` subclasses,
each with the exit code the command would give (``UsageError`` 2, ``InputError`` 3,
``RunFailed`` 1).

A replay of the shipped sample against the built-in simulator, gated from a test::

    from pathlib import Path
    from tailreplay import api

    def test_staging_keeps_the_tail(tmp_path: Path) -> None:
        peak = api.sample("peak", tmp_path / "peak.msgpack")
        run = api.replay(
            api.ReplayArgs(archives=(peak,), speed=api.speed("2x"), limit=100),
            out=tmp_path / "results.msgpack",
        )
        judged = api.report(run.results, slos=["ttft:p99<=1000ms", "error_rate<=1%"])
        assert judged.passed is not False, judged.missed  # None: the client was the limit

This module is an entry point, as the command line is: it composes the packages
below it and nothing in the product imports it (docs/api.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from yarl import URL

from tailreplay.errors import NotJudged, RunFailed, UsageError
from tailreplay.exporters.otlp_options import OtlpOptions
from tailreplay.replayer.replay_summary import Percentiles, ReplaySummary, TailSummary
from tailreplay.replayer.scrape import ScrapeTarget
from tailreplay.replayer.speed import Shape, Speed, parse_speed
from tailreplay.replayer.users import Users
from tailreplay.report.capacity_result import Search, Trial
from tailreplay.report.slo import Objective, parse_objectives
from tailreplay.report.write import ReportOptions, ReportResult, slo_verdict, write_report
from tailreplay.sim.launcher import BuiltinSim
from tailreplay.studies.capacity import CapacityStudy, LoadBy, run_capacity
from tailreplay.studies.replay import (
    claim_results,
    replay_config,
    report_options,
    run_replay,
    write_summary,
)
from tailreplay.studies.replay_args import ReplayArgs
from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.folders import expand_folders
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.samples import SAMPLES, write_sample
from tailreplay.traces.results.client_health import ClientVerdict
from tailreplay.traces.results.stats import DEFAULT_BUCKETS

__all__ = [
    "URL",
    "BuiltinSim",
    "CapacityStudy",
    "ClientVerdict",
    "Judged",
    "LoadBy",
    "Objective",
    "OtlpOptions",
    "Percentiles",
    "Record",
    "ReplayArgs",
    "ReplayRun",
    "ReplaySummary",
    "ScrapeTarget",
    "Search",
    "Shape",
    "Speed",
    "TailSummary",
    "Trial",
    "Users",
    "capacity",
    "objectives",
    "read",
    "replay",
    "report",
    "sample",
    "shadow_report",
    "speed",
    "write",
]

Say = Callable[[str], None]
Files = str | Path | Sequence[str | Path]
"""Archives as the command line takes them: one file or folder, or several; a folder
is read as the archives in it (a proxy's capture directory)."""


def _out(path: str | Path | None) -> Path | None:
    return None if path is None else Path(path)


def _paths(files: Files) -> list[Path]:
    # A str is one path, not a sequence of one-letter paths.
    given = [files] if isinstance(files, str | Path) else list(files)
    return expand_folders(Path(f) for f in given)


def speed(text: str) -> Shape:
    """A ``--speed`` value: ``2x``, ``200%``, a ramp ``1x..4x``, steps, pulses."""
    return parse_speed(text)


def objectives(*texts: str) -> list[Objective]:
    """``--slo`` values: ``latency:p99<=800ms*10``, ``ttft:p95<=1.2x``, ``error_rate<=1%``."""
    return parse_objectives(texts)


def sample(name: str, out: Path) -> Path:
    """Copy a shipped sample archive (``peak``: the busiest 5 minutes of Azure's 2023
    conversation trace) to ``out``; its path."""
    if name not in SAMPLES:
        raise ValueError(f"no sample {name!r}; there are: {', '.join(sorted(SAMPLES))}")
    write_sample(name, out)
    return out


def read(
    *paths: str | Path,
    skip_corrupt: bool = False,
    shadows: Literal["skip", "only", "keep"] = "skip",
) -> Iterator[Record]:
    """Every record of ``paths`` (files or folders) in order (a damaged file raises
    ``InputError``, or is read past its damage with ``skip_corrupt``). The copies
    ``proxy --shadow`` sent to its shadow are left out (``shadows="skip"``), read alone
    (``"only"``) or with production's records (``"keep"``)."""
    yield from ArchiveReader(_paths(paths), skip_corrupt=skip_corrupt, shadows=shadows)


def write(path: Path, records: Iterable[Record], *, source: str = "api") -> int:
    """A new archive at ``path`` (mode 0600) holding ``records``; how many were written."""
    return write_archive(path, make_header(source), records)


@dataclass(frozen=True)
class ReplayRun:
    """What one replay did."""

    summary: ReplaySummary
    results: Path
    """The result archive: one record per request, for ``report`` and ``read``."""
    exit_code: int
    """As ``replay`` exits: 0 done, 1 stopped early, nothing answered or an SLO missed
    (or not judged: the client was the bottleneck), 130 interrupted."""
    aborted: str | None
    """Why the run stopped itself (``fail_fast``, ``slo_stop``), else None."""
    judged: Judged | None = None
    """The report of the run, as ``replay --report``/``--slo`` make it after the run
    (written to ``args.report_out``), with the gate's verdict; None when neither
    ``report_out`` nor ``slos`` was given."""


def replay(
    args: ReplayArgs,
    *,
    out: str | Path | None = None,
    sim: BuiltinSim | None = None,
    say: Say | None = None,
) -> ReplayRun:
    """Replay ``args.archives`` (files, or folders as a proxy writes them) as
    ``tailreplay replay`` would, results to ``out`` (or ``args.out``; neither: a name
    made in ./replays/, and a folder: a name made in it). An existing result file is
    refused (``UsageError``) unless ``args.overwrite``.

    Without ``args.target`` the run starts the built-in simulator: ``sim`` (profile,
    seed, profile overrides such as ``(("max_num_seqs", 64),)``), else one of
    ``args.sim_profile`` seeded with ``args.seed``. ``args.sim_args``, the command
    line's raw simulator flags, are refused here (``ValueError``): give ``sim``.
    ``say`` hears the run's progress and warnings (default: nothing). After the run,
    as the command: ``args.report_out`` gets the report, ``args.slos`` are judged
    (``ReplayRun.judged``, and the exit code), ``args.json_out`` gets the summary."""
    if args.sim_args:
        raise ValueError("sim_args are the command line's; pass sim=BuiltinSim(...) instead")
    given = _out(out)
    if given is not None and args.out is not None and given != args.out:
        raise ValueError(f"out={given} and args.out={args.out} name two result files: give one")
    # Folders are read as the archives in them, as the command's arguments are.
    args = replace(args, archives=tuple(_paths(args.archives)), out=given or args.out)
    hear = say or (lambda line: None)
    builtin = None
    if args.target is None:
        builtin = sim or BuiltinSim(profile=args.sim_profile, seed=args.seed)
    with claim_results(args) as results:  # one writer, as the command's
        config = replay_config(args, builtin, results)
        outcome = run_replay(config, args.workers, hear)
    judged = _after_run(args, results, outcome.summary, hear)
    code = outcome.exit_code
    if code == 0 and judged is not None and args.slos and judged.verdict != "pass":
        # As ``replay --slo``: 1 missed, 4 not judged.
        code = NotJudged.exit_code if judged.verdict == "not_judged" else RunFailed.exit_code
    return ReplayRun(outcome.summary, results, code, outcome.aborted, judged)


def _after_run(args: ReplayArgs, results: Path, summary: ReplaySummary, say: Say) -> Judged | None:
    """``replay``'s steps after the run: the report (``report_out``, or to judge
    ``slos``), then the ``json_out`` summary with the gate's verdict, written even when
    the report fails."""
    result = None
    try:
        if args.report_out is not None or (args.slos and args.slo_report):
            options = replace(report_options(args, results), slo_stop=summary.slo_stop)
            result = write_report(options, say)
    finally:
        if args.json_out is not None:
            verdict = slo_verdict(result) if result is not None else None
            write_summary(args.json_out, summary, verdict)
    return None if result is None else _judged(result)


@dataclass(frozen=True)
class Judged:
    """A report, and its SLO gate's verdict as ``replay --slo`` and ``report --slo`` rule."""

    result: ReportResult
    """The report's figures (``result.report``: what ``report --json`` writes)."""
    passed: bool | None
    """True when every objective was met (or enough, by ``min_score``); None when the
    run could not be judged (``verdict`` "not_judged")."""
    missed: list[str]
    """The objectives missed overall."""
    client: ClientVerdict | None
    verdict: Literal["pass", "fail", "not_judged"] | None = None
    """The gate's one verdict, as the headline, the JSON and the exit code give it;
    None without objectives."""
    reason: str | None = None
    """Why not judged, what was missed, or the score that passed."""


def report(
    results: Files,
    *,
    recorded: Files | None = None,
    slos: Sequence[str] = (),
    min_score: float = 1.0,
    html: str | Path | None = None,
    markdown: str | Path | None = None,
    json: str | Path | None = None,
    deltas: str | Path | None = None,
    slo_by: str | None = None,
    slo_window_s: float | None = None,
    judge_partial: bool = False,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    thresholds: dict[str, float] | None = None,
    skip_corrupt: bool = False,
    seed: int = 0,
    shadow: bool = False,
    say: Say | None = None,
) -> Judged:
    """Recorded against replayed, as ``tailreplay report``: ``results`` (one file, a
    run's shards or their folder), against ``recorded`` (default: the archives the
    results' header names), judged by ``slos``; written to ``html``, ``markdown``,
    ``json`` and the per-request CSV ``deltas`` where given. As the command's
    options: ``slo_by`` and ``slo_window_s`` judge the objectives per class and per
    window too, ``judge_partial`` judges a run cut short, ``buckets`` are the input
    length buckets' edges, ``thresholds`` the findings' on the target's metrics,
    ``skip_corrupt`` reads past damage, ``seed`` the bootstrap's; ``shadow`` compares
    a capture's shadow copies with production (``shadow_report``)."""
    if isinstance(slos, str | bytes):  # a str is a sequence too: of one-letter objectives
        raise TypeError(f"slos is a list of objectives: [{slos!r}], not {slos!r}")
    if isinstance(min_score, bool) or not isinstance(min_score, int | float):
        raise TypeError(f"min_score is a number from 0 to 1, not {min_score!r}")
    if not 0 <= min_score <= 1:
        raise UsageError(f"min_score {min_score:g}: a share of the objectives' weight, 0..1")
    options = ReportOptions(
        replayed=_paths(results),
        recorded=None if recorded is None else _paths(recorded),
        objectives=parse_objectives(slos),
        min_score=min_score,
        html_out=_out(html),
        markdown_out=_out(markdown),
        json_out=_out(json),
        deltas_out=_out(deltas),
        slo_by=slo_by,
        slo_window_s=slo_window_s,
        judge_partial=judge_partial,
        buckets=buckets,
        thresholds=thresholds,
        skip_corrupt=skip_corrupt,
        seed=seed,
        shadow=shadow,
    )
    return _judged(write_report(options, say or (lambda line: None)))


def _judged(result: ReportResult) -> Judged:
    verdict = slo_verdict(result)
    client = result.report["client"]
    if verdict is None:  # no objectives: the gate passes unless the client was the limit
        bound = client is not None and client["client_bound"]
        return Judged(result, None if bound else True, [], client)
    return Judged(
        result,
        verdict["passed"],
        list(verdict["missed"]),
        client,
        verdict["state"],
        verdict["reason"],
    )


def shadow_report(
    capture: Files,
    *,
    slos: Sequence[str] = (),
    min_score: float = 1.0,
    html: str | Path | None = None,
    markdown: str | Path | None = None,
    json: str | Path | None = None,
    deltas: str | Path | None = None,
    slo_by: str | None = None,
    slo_window_s: float | None = None,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    thresholds: dict[str, float] | None = None,
    skip_corrupt: bool = False,
    seed: int = 0,
    say: Say | None = None,
) -> Judged:
    """Production against the shadow on the same requests, as ``tailreplay report
    --shadow``: ``capture`` (one file, or a proxy's files or their folder) was made
    with ``proxy --shadow``; a relative objective (``ttft:p99<=1.1x``) is relative to production.
    ``Judged.result.report["shadow"]`` names the shadow and the share copied. The other
    arguments are ``report``'s."""
    return report(
        capture,
        slos=slos,
        min_score=min_score,
        html=html,
        markdown=markdown,
        json=json,
        deltas=deltas,
        slo_by=slo_by,
        slo_window_s=slo_window_s,
        buckets=buckets,
        thresholds=thresholds,
        skip_corrupt=skip_corrupt,
        seed=seed,
        shadow=True,
        say=say,
    )


def capacity(study: CapacityStudy, *, say: Say | None = None) -> Search:
    """How much of the archives' busiest window the target serves within the study's
    objectives, as ``tailreplay capacity``: ``Search.capacity`` is the highest factor
    that passed (None: not even the lowest tried), ``Search.stopped`` says why a search
    ended early (the client was the bottleneck), ``Search.trials`` holds every trial."""
    study = replace(study, archives=tuple(_paths(study.archives)))  # folders, as the command
    return run_capacity(study, say or (lambda line: None))
