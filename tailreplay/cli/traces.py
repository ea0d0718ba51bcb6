"""``tailreplay traces``: look at, summarise, cut, import, export, fit and synthesise archives."""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from tailreplay.cli.echo import say, show, warn
from tailreplay.cli.option_fields import InputPath
from tailreplay.cli.options import (
    DURATION,
    FILE_OUT,
    archives_argument,
    buckets_option,
    otlp_options,
    output_option,
    skip_corrupt_option,
)
from tailreplay.errors import InputError, UsageError
from tailreplay.exporters.otlp_options import OtlpOptions
from tailreplay.output_path import check_output_file
from tailreplay.traces.archive.samples import SAMPLES
from tailreplay.units import format_duration, format_ns

__all__ = ["traces"]


@click.group()
def traces() -> None:
    """Inspect, summarise, merge and cut archives."""


@traces.command()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=True))
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Records to show.",
)
@skip_corrupt_option
def inspect(file: Path, count: int, skip_corrupt: bool) -> None:
    """Show an archive's header and its first N records."""
    from tailreplay.report.terminal import describe_header, describe_record
    from tailreplay.traces.archive.reader import ArchiveReader

    if file.is_dir():
        raise InputError(
            f"{file}: is a directory; inspect shows one archive: give one of the files in "
            "it (traces stats, replay and report take the folder)"
        )
    reader = ArchiveReader([file], skip_corrupt=skip_corrupt, order="file", shadows="keep")
    click.echo(describe_header(str(file), reader.headers[0]))
    if reader.headers[0]:
        show(f"integrity: {reader.reports[0].integrity}")
    for i, m in enumerate(itertools.islice(reader.iter_maps(), count), start=1):
        click.echo(describe_record(i, m))
    warn(reader.warnings())


@traces.command()
@archives_argument
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@buckets_option
@skip_corrupt_option
def stats(files: tuple[Path, ...], as_json: bool, buckets: list[int], skip_corrupt: bool) -> None:
    """Counts, rate, error rate, latency/TTFT/TPOT/token percentiles, per-bucket table."""
    from tailreplay.report.terminal import print_stats
    from tailreplay.traces.archive.columns import load_columns
    from tailreplay.traces.results.stats import STATS_FIELDS, STATS_PRESENCE, summarize

    cols = load_columns(
        files, STATS_FIELDS, presence_only=STATS_PRESENCE, skip_corrupt=skip_corrupt
    )
    warn(cols.warnings)
    for line in cols.unchecked:
        say(f"note: {line}")
    summary = summarize(cols, buckets)
    if as_json:
        click.echo(json.dumps(summary))
    else:
        print_stats(summary)


@traces.command()
@archives_argument
@output_option
@skip_corrupt_option
def merge(files: tuple[Path, ...], out: Path, skip_corrupt: bool) -> None:
    """Merge archives (e.g. from several proxy replicas) into one, in time order."""
    from tailreplay.traces.archive.ops import copy_records

    result = copy_records(files, out, source="merge", skip_corrupt=skip_corrupt)
    warn(result.warnings)
    click.echo(f"wrote {result.written:,} records to {out}", err=True)


@traces.command(name="slice")
@archives_argument
@output_option
@click.option("--from", "from_", help="Start (ISO-8601, unix seconds, or +DURATION).")
@click.option("--to", help="End, exclusive (same forms as --from).")
@click.option("--path", "path_glob", help="Keep paths matching this glob, e.g. '/v1/chat/*'.")
@click.option("--model", help="Keep records for this model.")
@click.option(
    "--status",
    type=click.Choice(["2xx", "3xx", "4xx", "5xx", "error"]),
    help="Keep records of this status class (error: a transport error, or 4xx/5xx).",
)
@skip_corrupt_option
def slice_(
    files: tuple[Path, ...],
    out: Path,
    from_: str | None,
    to: str | None,
    path_glob: str | None,
    model: str | None,
    status: str | None,
    skip_corrupt: bool,
) -> None:
    """Write the records matching every given filter to a new archive."""
    from tailreplay.traces.archive.ops import copy_records, record_filter, stop_at, time_window

    start_ns, end_ns = time_window(files, from_, to, skip_corrupt=skip_corrupt)
    keep = record_filter(
        start_ns=start_ns, end_ns=end_ns, path_glob=path_glob, model=model, status=status
    )
    stop = stop_at(files, end_ns, skip_corrupt=skip_corrupt)
    result = copy_records(
        files, out, source="slice", keep=keep, skip_corrupt=skip_corrupt, stop=stop
    )
    warn(result.warnings)
    # Reading stops once every record before --to is read: "read" is not the file's size.
    upto = " up to --to" if to else ""
    click.echo(
        f"wrote {result.written:,} records to {out} (of {result.read:,} read{upto})", err=True
    )
    if not result.written and result.read:
        click.echo(
            "warning: no record matched the filters: the archive written holds none", err=True
        )


@traces.command()
@archives_argument
@output_option
@click.option(
    "--window", type=DURATION, default="10m", show_default=True, help="Window length, e.g. 5m."
)
@click.option(
    "--by",
    type=click.Choice(["requests", "tokens"]),
    default="requests",
    show_default=True,
    help="Busiest by request count, or by input plus output tokens.",
)
@skip_corrupt_option
def peak(files: tuple[Path, ...], out: Path, window: float, by: str, skip_corrupt: bool) -> None:
    """Cut the busiest window (by requests or by tokens) into its own archive."""
    from tailreplay.traces.archive.ops import copy_records, find_peak, record_filter

    window_ns = round(window * 1e9)
    found = find_peak(files, window_ns, by=by, skip_corrupt=skip_corrupt)
    keep = record_filter(start_ns=found.start_ns, end_ns=found.end_ns)
    result = copy_records(
        files,
        out,
        source="peak",
        keep=keep,
        skip_corrupt=skip_corrupt,
        stop=found.stop,
        extra_header={"peak": {"window_s": window, "by": by, "start_ns": found.start_ns}},
    )
    warn(result.warnings)
    click.echo(
        f"busiest {format_duration(window)} by {by}: {format_ns(found.start_ns)} to "
        f"{format_ns(found.end_ns)}, {found.requests:,} requests, {found.tokens:,} tokens; "
        f"wrote {result.written:,} records to {out}",
        err=True,
    )


@traces.command()
@click.argument("file", type=InputPath())
@output_option
@skip_corrupt_option
def upgrade(file: Path, out: Path, skip_corrupt: bool) -> None:
    """Rewrite an archive in the current format version (with checksums)."""
    from tailreplay.traces.archive.format import VERSION
    from tailreplay.traces.archive.ops import upgrade_archive

    done = upgrade_archive(file, out, skip_corrupt=skip_corrupt)
    warn(done.warnings)
    click.echo(
        f"wrote {done.written:,} records to {out} (format version {done.from_version} -> "
        f"{VERSION})",
        err=True,
    )


@traces.command(name="import")
@click.argument(
    "fmt",
    metavar="FORMAT",
    type=click.Choice(["azure", "mooncake", "burstgpt", "har", "otlp-json"]),
)
@click.argument("src", type=click.Path(path_type=Path, dir_okay=True))
@output_option
@click.option("--strict", is_flag=True, help="A malformed row is an error (exit 3), not a warning.")
def import_(fmt: str, src: Path, out: Path, strict: bool) -> None:
    """Import a public trace as an archive. FORMAT is one of azure, mooncake, burstgpt,
    har, otlp-json."""
    from tailreplay.traces.importers import import_file

    check_output_file("-o", out, inputs=[src])
    written, report = import_file(fmt, src, out, strict=strict)
    warn([f"{report.where(place)}: {reason}; skipped" for place, reason in report.malformed[:20]])
    if len(report.malformed) > 20:
        warn([f"{len(report.malformed) - 20} more malformed rows skipped"])
    warn([f"{report.where(place)}: {reason}; skipped" for place, reason in report.invalid[:20]])
    if len(report.invalid) > 20:
        warn([f"{len(report.invalid) - 20} more invalid records skipped"])
    skipped = len(report.malformed) + len(report.invalid)
    said = f" ({skipped:,} {'row' if skipped == 1 else 'rows'} skipped)" if skipped else ""
    say(f"imported {written:,} records into {out}{said}")


@traces.group(name="export")
def export_() -> None:
    """Export archives: Mooncake JSONL (vLLM bench, AIPerf), plain JSONL, every request's
    times (raw), or OTLP spans."""


@export_.command(name="mooncake")
@archives_argument
@output_option
@skip_corrupt_option
def export_mooncake(files: tuple[Path, ...], out: Path, skip_corrupt: bool) -> None:
    """Mooncake JSONL: timestamp, input/output lengths, hash_ids, session."""
    from tailreplay.openai_api import calls_that_generate_nothing
    from tailreplay.traces.archive.export import export_mooncake

    check_output_file("-o", out, inputs=files)
    done = export_mooncake(files, out, skip_corrupt=skip_corrupt)
    warn(done.warnings)
    idle = f" ({calls_that_generate_nothing(done.left_out)} left out)" if done.left_out else ""
    click.echo(f"exported {done.written:,} records to {out}{idle}", err=True)


@export_.command(name="jsonl")
@archives_argument
@output_option
@skip_corrupt_option
def export_jsonl(files: tuple[Path, ...], out: Path, skip_corrupt: bool) -> None:
    """One JSON object per record (bytes as hex)."""
    from tailreplay.traces.archive.export import export_jsonl

    check_output_file("-o", out, inputs=files)
    done = export_jsonl(files, out, skip_corrupt=skip_corrupt)
    warn(done.warnings)
    click.echo(f"exported {done.written:,} records to {out}", err=True)


@export_.command(name="raw")
@archives_argument
@output_option
@skip_corrupt_option
def export_raw(files: tuple[Path, ...], out: Path, skip_corrupt: bool) -> None:
    """Every request as one JSON line: due, send, first-token, every token event and end
    times, status, tokens, attempt (docs/replay.md, "The raw export")."""
    from tailreplay.traces.results.raw_export import export_raw

    check_output_file("-o", out, inputs=files)
    written, warnings = export_raw(files, out, skip_corrupt=skip_corrupt)
    warn(warnings)
    click.echo(f"exported {written:,} requests to {out}", err=True)


@export_.command(name="otlp")
@archives_argument
@otlp_options(spans_of_live_traffic=False)
@click.option(
    "--rebase-time",
    is_flag=True,
    help="Shift all timestamps so the last span ends now (some backends drop old spans).",
)
@click.option(
    "--ids",
    type=click.Choice(["auto", "keep", "new"]),
    default="auto",
    show_default=True,
    help="Span ids: the recorded ones (keep), new ones linked to them (new), or new only "
    "where the archive's spans were already exported live (auto; a receiver drops a "
    "repeated id).",
)
@skip_corrupt_option
def export_otlp(
    files: tuple[Path, ...], otlp: OtlpOptions, rebase_time: bool, ids: str, skip_corrupt: bool
) -> None:
    """Send every record as a span (original timestamps) to an OTLP endpoint."""
    from tailreplay.exporters.otlp_export import export_otlp, rebase_shift
    from tailreplay.traces.archive.columns import load_columns

    if not otlp.enabled:
        raise UsageError("no --otlp-endpoint (nor OTEL_EXPORTER_OTLP_ENDPOINT) to export to")
    # One pass for the count (the progress bar) and, to rebase, the last end time.
    cols = load_columns(files, ["duration_ns"] if rebase_time else [], skip_corrupt=skip_corrupt)
    shift = rebase_shift(cols, time.time_ns()) if rebase_time else 0
    with _progress_bar(cols.n, "spans") as advance:
        done = export_otlp(
            files,
            otlp,
            shift_ns=shift,
            skip_corrupt=skip_corrupt,
            new_ids={"auto": None, "keep": False, "new": True}[ids],
            progress=advance,
        )
    renamed = (
        f" ({done.renamed:,} under new span ids linked to the originals exported live)"
        if done.renamed
        else ""
    )
    click.echo(f"exported {done.spans:,} spans to {otlp.shown_endpoint()}{renamed}", err=True)


@contextlib.contextmanager
def _progress_bar(total: int, unit: str) -> Iterator[Callable[[int], None]]:
    """A progress bar on a terminal; a line every 10% elsewhere. Yields set(done)."""
    if not sys.stderr.isatty():
        step = max(total // 10, 1)
        last = [0]

        def line(done: int) -> None:
            if done - last[0] >= step and done < total:
                last[0] = done
                click.echo(f"  {done:,} / {total:,} {unit}", err=True)

        yield line
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(unit, total=total)
        yield lambda done: bar.update(task, completed=done)


@traces.command()
@click.argument("name", type=click.Choice(sorted(SAMPLES)), default="peak")
@click.option(
    "-o",
    "--out",
    "--output",
    "out",
    type=FILE_OUT,
    default=None,
    help="Default: NAME.msgpack.",
)
def sample(name: str, out: Path | None) -> None:
    """Write an archive shipped with tailreplay, e.g. to try `replay` on.

    \b
    tailreplay traces sample peak -o peak.msgpack
    replay --speed 2x peak.msgpack
    """
    from tailreplay.traces.archive.samples import write_sample

    out = out or Path(f"{name}.msgpack")
    check_output_file("-o", out)
    write_sample(name, out)
    click.echo(f"wrote {out}: {SAMPLES[name][1]}", err=True)
