"""Commands that write speak alike: ``-o``, ``--out`` and ``--output`` on each; ``--json -``
puts the document alone on stdout; ``capacity``'s exit code says whether a
capacity was found, and its trial lines name the objective that decided."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.cli.capacity import _finish
from tailreplay.errors import NotJudged, RunFailed
from tailreplay.report.capacity_result import Check, Search, Trial, trial_line
from tailreplay.traces.archive.reader import ArchiveReader


@pytest.fixture(scope="module")
def peak(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("peak") / "peak.msgpack"
    result = CliRunner().invoke(cli, ["traces", "sample", "peak", "--output", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("flag", ["-o", "--out", "--output"])
def test_every_writing_command_takes_each_spelling(tmp_path: Path, peak: Path, flag: str) -> None:
    runner = CliRunner()
    for argv in (
        ["traces", "slice", str(peak), "--to", "+10s", flag, str(tmp_path / "slice.msgpack")],
        ["replay", "--dry-run", "--limit", "5", flag, str(tmp_path / "dry.msgpack"), str(peak)],
        ["traces", "sample", "peak", flag, str(tmp_path / "sample.msgpack")],
    ):
        result = runner.invoke(cli, argv)
        assert result.exit_code == 0, (argv, result.output)
    assert len(list(ArchiveReader([tmp_path / "dry.msgpack"]))) == 5
    help_text = runner.invoke(cli, ["proxy", "--help"]).output
    assert "-o, --out, --output" in help_text


def test_json_dash_is_the_document_alone_on_stdout(tmp_path: Path, peak: Path) -> None:
    runner = CliRunner()
    dry = tmp_path / "dry.msgpack"
    replay = runner.invoke(
        cli, ["replay", "--dry-run", "--limit", "50", "-o", str(dry), "--json", "-", str(peak)]
    )
    assert replay.exit_code == 0, replay.output
    assert json.loads(replay.stdout)["requests"] == 50
    assert f"results: {dry}" in replay.stderr
    report = runner.invoke(cli, ["report", str(dry), "--json", "-"])
    assert report.exit_code == 0, report.output
    assert "overall" in json.loads(report.stdout)
    assert "replayed" in report.stderr  # the tables, on stderr
    assert not Path("-").exists()


def _trial(factor: float, verdict: str, latency_ms: float, ttft_ms: float) -> Trial:
    checks = [
        Check("latency:p99<=2000ms", latency_ms, None, None, 2000.0, "pass"),
        Check("ttft:p99<=500ms", ttft_ms, None, None, 500.0, verdict),  # type: ignore[arg-type]
    ]
    return Trial(factor, 1, 100, 0, 0.0, 10.0, 1.0, {}, checks, verdict)  # type: ignore[arg-type]


def test_a_trial_line_names_the_objective_that_decided() -> None:
    # P99 latency was shown while TTFT decided.
    assert trial_line(_trial(3.0, "fail", 900.0, 640.0)) == (
        "100 requests, ttft:p99<=500ms: 640 ms, errors 0"
    )
    assert trial_line(_trial(2.0, "pass", 1900.0, 100.0)) == (
        "100 requests, latency:p99<=2000ms: 1,900 ms, errors 0"
    )


def test_capacity_exits_0_when_found_even_if_the_client_gave_out_later(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = Search(
        trials=[_trial(3.58, "pass", 900.0, 400.0), _trial(4.0, "fail", 900.0, 700.0)],
        capacity=3.58,
        interval=(3.58, 4.0),
        broke_first="ttft:p99<=500ms",
        stopped="the client was the bottleneck at 3.762x (dispatch lag)",
    )
    _finish(found, None, None, None)  # no exception: exit 0
    err = capsys.readouterr().err
    assert "warning: the search stopped: the client was the bottleneck at 3.762x" in err
    assert "3.58x is a lower bound" in err
    with pytest.raises(RunFailed, match=r"under --require 4x"):
        _finish(found, None, None, 4.0)


def test_no_capacity_below_the_lowest_factor_exits_1_and_a_search_stopped_before_4() -> None:
    below = Search(trials=[_trial(0.25, "fail", 900.0, 900.0)], interval=(None, 0.25))
    with pytest.raises(RunFailed, match=r"no capacity at the SLO: below 0\.25x"):
        _finish(below, None, None, None)
    stopped = Search(trials=[], stopped="the client was the bottleneck at 1x (dispatch lag)")
    with pytest.raises(NotJudged, match="the search stopped before any trial passed"):
        _finish(stopped, None, None, None)


def test_merged_shards_keep_their_run_and_its_common_start(tmp_path: Path, peak: Path) -> None:
    runner = CliRunner()
    start = str(2_000_000_000)  # unix seconds: a start in 2033, not waited for by a dry run
    parts = []
    for i in range(2):
        part = tmp_path / f"shard{i}.msgpack"
        args = ["--dry-run", "--limit", "40", "--shard", f"{i}/2", "--start-at", start]
        result = runner.invoke(cli, ["replay", *args, "-o", str(part), str(peak)])
        assert result.exit_code == 0, result.output
        parts.append(str(part))
    merged = tmp_path / "merged.msgpack"
    result = runner.invoke(cli, ["traces", "merge", *parts, "-o", str(merged)])
    assert result.exit_code == 0, result.output
    header = ArchiveReader([merged]).headers[0]
    assert header["start_at_ns"] == 2_000_000_000 * 10**9
    assert header["shard"] == [0, 1] and header["speed"] == "1x"
    other = tmp_path / "other.msgpack"
    args = ["--dry-run", "--limit", "40", "--speed", "2x"]
    assert runner.invoke(cli, ["replay", *args, "-o", str(other), str(peak)]).exit_code == 0
    result = runner.invoke(cli, ["traces", "merge", parts[0], str(other), "-o", str(merged)])
    assert result.exit_code == 0
    assert "the inputs are results of different runs (speed: '1x' and '2x')" in result.stderr
    assert "speed" not in ArchiveReader([merged]).headers[0]


def test_the_command_line_a_header_keeps_has_no_credential() -> None:
    from tailreplay.cli.command_line import shown_command

    argv = [
        "/usr/local/bin/replay",
        "--target",
        "https://u:pw@h/v1?api_key=zz",
        "--header",
        "Authorization: Bearer sk-abcdefghijklmnopqrstuvwx",
        "--header=X-Api-Key: abc",
        "--otlp-header",
        "x-honeycomb-team=k3y",
        "--speed",
        "2x",
        "peak.msgpack",
        "--password=hunter22",
    ]
    shown = shown_command(argv)
    assert shown[:4] == ("replay", "--target", "https://***@h/v1?api_key=***", "--header")
    assert shown[4:7] == ("Authorization: ***", "--header=X-Api-Key: ***", "--otlp-header")
    assert shown[7:11] == ("x-honeycomb-team=***", "--speed", "2x", "peak.msgpack")
    joined = " ".join(shown)
    for secret in ("pw", "zz", "sk-abc", "abc", "k3y", "hunter22"):
        assert f" {secret}" not in f" {joined}" and f"{secret} " not in joined
    assert "hunter22" not in joined and "k3y" not in joined


def test_only_json_takes_dash_for_stdout(tmp_path: Path, peak: Path) -> None:
    # Elsewhere "-" made a file named "-": refused, with the fix in the message.
    runner = CliRunner()
    for argv in (
        ["report", str(peak), "--markdown", "-"],
        ["traces", "export", "jsonl", str(peak), "-o", "-"],
    ):
        result = runner.invoke(cli, argv)
        assert result.exit_code == 2, result.output
        assert "-: only --json writes to stdout; give a file name" in result.stderr
    assert not Path("-").exists()


def test_an_output_ending_in_a_slash_is_a_folder(
    tmp_path: Path, peak: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "-o results/" once wrote a file named "results". A replay writes its results in
    # the folder (made if missing, as replays/ is); a command that writes one named
    # file refuses a folder, with the fix in the message.
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for folder in ("results/", "made"):
        (tmp_path / "made").mkdir(exist_ok=True)
        argv = ["replay", "--dry-run", "--limit", "3", "-o", folder, str(peak)]
        result = runner.invoke(cli, argv)
        assert result.exit_code == 0, result.output
        (written,) = (tmp_path / folder).iterdir()
        assert written.name.startswith("replay-") and written.name.endswith("-dry.msgpack")
        assert len(list(ArchiveReader([written]))) == 3
    for argv in (
        ["traces", "sample", "peak", "-o", "nodir/"],
        ["report", str(peak), "--replay-only", "--html", "made/"],
        ["replay", "--dry-run", "--json", "summary/", str(peak)],
    ):
        result = runner.invoke(cli, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "names a folder; give a file name" in result.stderr
    assert not (tmp_path / "nodir").exists() and not (tmp_path / "summary").exists()
