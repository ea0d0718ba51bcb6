"""Bad input on every command: one line on stderr, exit 2, and nothing already on disk harmed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tests.helpers import REPO

PEAK = REPO / "traces" / "peak.msgpack"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "in.msgpack"
    shutil.copyfile(PEAK, path)
    return path


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["traces", "merge"], "-o"),
        (["traces", "slice"], "-o"),
        (["traces", "peak", "--window", "1m"], "-o"),
        (["traces", "export", "jsonl"], "-o"),
        (["traces", "export", "mooncake"], "-o"),
        (["traces", "fit"], "-o"),
        (["report", "--replay-only"], "--json"),
        (["report", "--replay-only"], "--markdown"),
        (["report", "--replay-only"], "--html"),
        (["replay", "--dry-run"], "--out"),
        (["replay", "--dry-run"], "--json"),
    ],
)
def test_no_command_writes_over_its_input(archive: Path, command: list[str], flag: str) -> None:
    before = archive.read_bytes()
    code, _, err = _run(*command, str(archive), flag, str(archive))
    assert code == 2, err
    assert err == f"Error: {archive}: the output is also an input; choose another {flag}\n"
    assert archive.read_bytes() == before


def test_import_and_synth_do_not_write_over_their_source(archive: Path, tmp_path: Path) -> None:
    model = tmp_path / "m.json"
    assert _run("traces", "fit", str(archive), "-o", str(model))[0] == 0
    text = model.read_text()
    code, _, err = _run("traces", "synth", str(model), "-o", str(model), "--count", "5")
    assert code == 2 and "the output is also an input" in err
    assert model.read_text() == text
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 5, "output_length": 3}) + "\n")
    code, _, err = _run("traces", "import", "mooncake", str(trace), "-o", str(trace))
    assert code == 2 and "the output is also an input" in err
    assert trace.read_text().startswith('{"timestamp": 0')


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "--dry-run", "--tail-quantile", "nan"],
        ["replay", "--dry-run", "--tail-stretch", "nan"],
        ["replay", "--dry-run", "--trace-sample", "nan"],
        ["report", "--replay-only", "--slo", "latency:p99<=1s", "--slo-min-score", "nan"],
    ],
)
def test_nan_and_inf_are_refused_before_any_work(archive: Path, args: list[str]) -> None:
    code, out, err = _run(*args, str(archive))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "is not a finite number" in err


def test_nan_sample_and_rate_are_refused(tmp_path: Path, archive: Path) -> None:
    code, _, err = _run("proxy", "--upstream", "http://127.0.0.1:9", "--sample", "nan")
    assert code == 2 and "'--sample': nan is not a finite number" in err
    model = tmp_path / "m.json"
    assert _run("traces", "fit", str(archive), "-o", str(model))[0] == 0
    code, _, err = _run("traces", "synth", str(model), "-o", str(tmp_path / "s.msgpack"),
                        "--count", "5", "--rate", "nan")  # fmt: skip
    assert code == 2 and "'--rate': nan is not a finite number" in err


@pytest.mark.parametrize(
    "args",
    [
        ["sim", "--listen", "127.0.0.1:99999"],
        ["proxy", "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:65536"],
        ["replay", "--metrics-listen", "127.0.0.1:70000", str(PEAK)],
    ],
)
def test_a_port_out_of_range_is_a_usage_error(args: list[str]) -> None:
    code, _, err = _run(*args)
    assert code == 2 and err.startswith("Error: invalid --") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("Authorization:", "the value is empty (an unset variable?)"),
        ("sk-live-0123456789abcdef:", "the value is empty (an unset variable?)"),
        ("HTTP2-Settings: AAMAAABkAAQAAP__", "written by the HTTP client for the connection"),
        ("Authorization:   ", "the value is empty (an unset variable?)"),
        ("Authorization Bearer sk-live-0123456789abcdef", "no ':' found"),
        ("Authorization=Bearer sk-live-0123456789: x", "the name is not a header name"),
        ("Bearer sk-live-0123456789abcdef: x", "the name is not a header name"),
        ("X" * 257 + ": x", "at most 256"),
        ("X-Key: a\rInjected: 1", "the value holds a control character"),
        ("Host: other.example", "Host is written by the HTTP client for the target's address"),
        ("content-length: 5", "content-length is written by the HTTP client for each request"),
        ("Transfer-Encoding: chunked", "written by the HTTP client for each request's body"),
        ("Connection: close", "Connection is written by the HTTP client for the connection"),
        ("traceparent: 00-x", "traceparent is set for each request"),
        ("x-tailreplay-preflight: 1", "marks tailreplay's own preflight request"),
    ],
)
@pytest.mark.parametrize("command", [["replay", str(PEAK)], ["proxy"]])
def test_a_header_without_a_usable_value_is_refused_without_echoing_it(
    command: list[str], value: str, said: str
) -> None:
    upstream = ["--upstream", "http://127.0.0.1:9", "--shadow", "http://127.0.0.1:10"]
    flag = "--header" if command[0] == "replay" else "--shadow-header"
    args = [*command, flag, value] if command[0] == "replay" else [*command, *upstream, flag, value]
    code, _, err = _run(*args)
    assert code == 2 and err.count("\n") == 1, err
    assert f"invalid {flag}" in err and said in err, err
    assert "sk-live" not in err and "Injected" not in err


def test_an_empty_time_means_no_bound(archive: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.msgpack"
    code, _, err = _run("traces", "slice", str(archive), "-o", str(out), "--from", "", "--to", "")
    assert code == 0 and "wrote 2,382 records to" in err and "(of 2,382 read)" in err


def test_the_replay_script_names_itself_and_says_its_version() -> None:
    import subprocess
    import sys

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        code = "from tailreplay.cli import replay_main; replay_main()"
        return subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
        )

    from tailreplay.version import __version__

    assert script("--version").stdout.strip() == f"replay, version {__version__}"
    helped = script("--help")
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: replay [OPTIONS] ARCHIVES")
    assert "Examples:" in helped.stdout and "Exit codes:" in helped.stdout
    missing = script()
    assert missing.returncode == 2
    assert missing.stderr.strip() == "Error: Missing argument 'ARCHIVES...'. (see 'replay --help')"


def test_every_command_shows_an_example_that_parses() -> None:
    """Each command's --help ends with an example; its flags exist and its values parse."""
    import shlex

    import click

    from tailreplay.cli import EXAMPLES, cli

    def leaves(group: click.Group, prefix: str = "") -> list[str]:
        out = []
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                out += leaves(command, f"{prefix}{name} ")
            else:
                out.append(f"{prefix}{name}")
        return out

    assert set(leaves(cli)) - {"replay"} == set(EXAMPLES)
    for path, example in EXAMPLES.items():
        words = shlex.split(example)[1:]
        command: click.Command = cli
        while isinstance(command, click.Group):
            command = command.commands[words.pop(0)]
        assert example in (command.epilog or ""), path
        ctx = click.Context(command, info_name=path)
        opts, _, _ = command.make_parser(ctx).parse_args(list(words))  # unknown flags raise
        for param in command.params:  # each value given converts (types, ranges, choices)
            if param.name in opts and isinstance(param, click.Option):
                param.type_cast_value(ctx, opts[param.name])


def test_a_metrics_port_in_use_is_one_line_before_anything_is_sent(
    archive: Path, tmp_path: Path
) -> None:
    import socket

    out = tmp_path / "r.msgpack"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = f"127.0.0.1:{busy.getsockname()[1]}"
        code, _, err = _run("replay", "--target", "http://127.0.0.1:9", "--metrics-listen",
                            taken, "--out", str(out), str(archive))  # fmt: skip
    assert code == 2 and err.startswith(f"Error: --metrics-listen {taken}:"), err
    assert err.count("\n") == 1 and not out.exists()  # refused before the preflight


@pytest.mark.parametrize("command", [["traces", "inspect", "-n", "2000"], ["report"]])
def test_a_reader_that_stops_reading_is_exit_141_not_a_failure(command: list[str]) -> None:
    """``tailreplay ... | head -1``: the command ends as one killed by SIGPIPE does
    (141 in a shell), not with 1, which says an SLO was missed; nothing on stderr."""
    peak = REPO / "traces" / "peak.msgpack"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailreplay", *command, str(peak)],
        stdout=write_end, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(write_end)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err
    assert err == b""


def test_an_empty_window_says_which_flags_left_nothing(tmp_path: Path, archive: Path) -> None:
    """A slice that matched nothing warns; a replay of nothing names the flags that left
    nothing, or says the archives hold none when no flag narrowed them."""
    window = tmp_path / "window.msgpack"
    code, _, err = _run("traces", "slice", str(archive), "--status", "5xx", "-o", str(window))
    assert code == 0
    assert "warning: no record matched the filters: the archive written holds none" in err
    code, _, err = _run("replay", "--dry-run", "--out", str(tmp_path / "a.msgpack"), str(window))
    assert (code, err.strip()) == (3, "Error: no records to replay: the archives hold none")
    code, _, err = _run("replay", "--dry-run", "--out", str(tmp_path / "b.msgpack"),
                        "--from", "+1h", str(archive))  # fmt: skip
    assert (code, err.strip()) == (3, "Error: no records to replay (none left after --from)")


def test_a_header_from_the_environment_follows_the_same_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tailreplay.errors import UsageError
    from tailreplay.studies.replay import send_headers

    monkeypatch.setenv("TAILREPLAY_HEADER_AUTHORIZATION", "Bearer from-env")
    # --header wins whatever the case of its name: one Authorization is sent.
    assert send_headers((("authorization", "Bearer from-flag"),)) == {
        "authorization": "Bearer from-flag"
    }
    monkeypatch.setenv("TAILREPLAY_HEADER_AUTHORIZATION", "")
    with pytest.raises(UsageError, match="AUTHORIZATION: the value is empty"):
        send_headers(())
    monkeypatch.setenv("TAILREPLAY_HEADER_AUTHORIZATION", "  Bearer k\t")
    assert send_headers(()) == {"Authorization": "Bearer k"}  # trimmed, as --header is
    monkeypatch.setenv("TAILREPLAY_HEADER_authorization", "Bearer other")
    with pytest.raises(UsageError, match="AUTHORIZATION and TAILREPLAY_HEADER_authorization"):
        send_headers(())
    monkeypatch.delenv("TAILREPLAY_HEADER_authorization")
    monkeypatch.setenv("TAILREPLAY_HEADER_AUTHORIZATION", "Bearer k")
    monkeypatch.setenv("TAILREPLAY_HEADER_HOST", "other.example")
    with pytest.raises(UsageError, match="TAILREPLAY_HEADER_HOST: Host is written by the HTTP"):
        send_headers(())


@pytest.mark.parametrize(
    "args",
    [
        ["traces", "synth", "{dir}", "-o", "{out}", "--count", "3"],
        ["traces", "validate-model", "{archive}", "--model", "{dir}"],
        ["traces", "upgrade", "{dir}", "-o", "{out}"],
        ["sim", "calibrate", "{dir}", "-o", "{out}"],
        ["capacity", "{archive}", "--twin", "{dir}"],
        ["replay", "--dry-run", "{archive}", "--otlp-endpoint", "http://127.0.0.1:9",
         "--otlp-ca", "{dir}"],
    ],
)  # fmt: skip
def test_a_folder_given_for_a_file_read_is_unreadable_input(
    archive: Path, tmp_path: Path, args: list[str]
) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    names = {"dir": str(folder), "out": str(tmp_path / "out"), "archive": str(archive)}
    code, out, err = _run(*(a.format(**names) for a in args))
    assert (code, out, err) == (3, "", f"Error: {folder}: a folder, not a file\n")
    assert not (tmp_path / "out").exists()


def test_a_missing_twin_is_unreadable_input(archive: Path, tmp_path: Path) -> None:
    code, _, err = _run("capacity", str(archive), "--twin", str(tmp_path / "p.json"))
    assert (code, err) == (3, f"Error: {tmp_path / 'p.json'}: no such file\n")


@pytest.mark.parametrize(
    ("endpoint", "said"),
    [
        ("http://[bad", "not a URL (Invalid IPv6 URL)"),
        ("not a url", "is not an http(s):// or grpc(s):// URL with a host"),
        ("ftp://127.0.0.1/v1/traces", "is not an http(s):// or grpc(s):// URL with a host"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["proxy", "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0"],
        ["replay", str(PEAK), "--target", "http://127.0.0.1:9"],
        ["traces", "export", "otlp", str(PEAK)],
    ],
    ids=["proxy", "replay", "export"],
)
@pytest.mark.parametrize("given_as", ["--otlp-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT"])
def test_an_otlp_endpoint_that_is_no_url_is_a_usage_error(
    command: list[str], endpoint: str, said: str, given_as: str, tmp_path: Path
) -> None:
    """Refused in one line before anything starts, never a traceback from the process
    that would export (the proxy's recorder)."""
    flags = ["--otlp-endpoint", endpoint] if given_as.startswith("--") else []
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint} if not flags else None
    if command[0] == "proxy":
        flags += ["--out", str(tmp_path / "capture")]
    run = subprocess.run(
        [sys.executable, "-m", "tailreplay", *command, *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"Error: {given_as}: "), run.stderr
    assert said in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert not (tmp_path / "capture").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["proxy", "--upstream", "http://127.0.0.1:9", "--redact-header", ""], "not a header name"),
        (["proxy", "--upstream", "http://127.0.0.1:9", "--redact-header", "a b"], "not a header"),
        (["proxy", "--upstream", "http://127.0.0.1:0"], "port 0 cannot be connected to"),
        (["replay", "--target", "http://u:pw@127.0.0.1:0", "x.msgpack"], "port 0 cannot be"),
        # yarl reads each of these as port 80: the URL would say one thing, connect another.
        (["replay", "--target", "http://u:pw@127.0.0.1:+80", "x"], "port must be digits 0-9"),
        (["replay", "--target", "http://127.0.0.1: 80", "x.msgpack"], "port must be digits 0-9"),
        (["proxy", "--upstream", "http://127.0.0.1:\u0668\u0660"], "port must be digits 0-9"),
        (["proxy", "--upstream", "http://[::1]:+80/v1"], "port must be digits 0-9"),
        (["proxy", "--listen", "127.0.0.1:\u0668\u0660", "--upstream", "http://h:9"], "HOST:PORT"),
        (["replay", "--dry-run", "--shard", "0/99999999999999999999999", "x"], "N <= 65,536"),
        (["replay", "--dry-run", "--shard", "0/65537", "x.msgpack"], "N <= 65,536"),
        (["replay", "--dry-run", "--shard", "\u0660/\u0662", "x.msgpack"], "N <= 65,536"),
    ],
)
def test_a_header_name_port_or_shard_that_is_none_is_refused(
    args: list[str], said: str, tmp_path: Path
) -> None:
    code, _, err = _run(*args, "--out", str(tmp_path / "out"))
    assert code == 2 and err.startswith("Error: invalid "), err
    assert said in err and err.count("\n") == 1 and "pw" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--prefix", "../../escape", "give the start of a file name"),
        ("--prefix", "a/b", "give the start of a file name"),
        ("--prefix", "", "give the start of a file name"),
        ("--timeout", "0s", "give a duration above 0"),
        ("--body-timeout", "0", "give a duration above 0"),
        ("--idle-timeout", "0ms", "give a duration above 0"),
        ("--rotate-interval", "0s", "give a duration above 0"),
        ("--max-body", "0", "give a size above 0"),
        ("--rotate-size", "0B", "give a size above 0"),
    ],
)
def test_a_proxy_option_that_would_fail_every_request_or_write_elsewhere_is_refused(
    flag: str, value: str, said: str, tmp_path: Path
) -> None:
    out = tmp_path / "capture"
    code, _, err = _run("proxy", "--upstream", "http://127.0.0.1:9", "--out", str(out), flag, value)
    assert code == 2 and err.startswith(f"Error: invalid {flag} {value!r}: "), err
    assert said in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--seed", "99999999999999999999999"],
        ["--seed", "18446744073709551616"],
        ["--start-at", "99999999999999"],
        ["--start-at", "9999-12-31T23:59:59Z"],
        ["--start-at", "1e300"],
        ["--from", "1e300"],
        ["--to", "1e300"],
        ["--from", "-1e300"],
    ],
)
def test_a_seed_or_time_the_archive_cannot_hold_is_a_usage_error(
    args: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "r.msgpack"
    code, _, err = _run("replay", str(PEAK), "--dry-run", "--out", str(out), *args)
    assert code == 2 and err.startswith("Error: ") and err.count("\n") == 1, err
    assert "must be between 1970 and 2116" in err or "is not in the range" in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--max-context", "9223372036854775808"], "--max-context"),
        (["--otlp-endpoint", "http://127.0.0.1:0/v1/traces"], "port 0 cannot be connected to"),
        (["--otlp-endpoint", "http://127.0.0.1:+4318/v1/traces"], "the port must be digits 0-9"),
        (["--otlp-endpoint", "grpc://127.0.0.1:\u0664\u0663\u0661\u0667"], "port must be digits"),
    ],
)
def test_a_context_or_otlp_port_nothing_could_have_is_a_usage_error(
    args: list[str], said: str, tmp_path: Path
) -> None:
    out = tmp_path / "r.msgpack"
    code, _, err = _run("replay", str(PEAK), "--dry-run", "--out", str(out), *args)
    assert code == 2 and err.startswith("Error: ") and said in err, err
    assert "Traceback" not in err and not out.exists()
