"""Output never trusts its input: control characters from archives and targets are
shown escaped on the terminal, and a Markdown report's cells escape HTML and pipes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.printable import printable
from tests.helpers import HEADER, chat_archive, write_plain
from tests.proxy_helpers import serve_in_thread

T0 = 1_700_000_000 * 10**9
OSC52 = "\x1b]52;c;aGk=\x07"  # sets the clipboard
CLEAR = "\x1b[2J"
HOSTILE = f"{OSC52}{CLEAR}\rFAKE\u202e\x9b31m"
_RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]")  # a newline ends a line


def _raw(text: str) -> list[str]:
    return _RAW.findall(text)


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.stdout, result.stderr


def test_printable_escapes_what_a_terminal_obeys_and_keeps_the_rest() -> None:
    assert printable(HOSTILE) == "\\x1b]52;c;aGk=\\x07\\x1b[2J\\rFAKE\\u202e\\x9b31m"
    assert printable("tab\there\nnew") == "tab\\there\\nnew"
    kept = "llama-3 · 東京 · ¿qué? — ✓"
    assert printable(kept) == kept


def _results(tmp_path: Path) -> Path:
    """A replay's results whose target answered with escapes, markup and HTML."""
    maps = []
    for i in range(40):
        failed = i % 4 == 0
        maps.append(
            {
                "start_ns": T0 + i * 10**8,
                "status": 400 if failed else 200,
                "duration_ns": 10**7 + i * 10**5,
                "ttfb_ns": 10**6,
                "lag_ns": 10**5,
                "model": f"m{HOSTILE}",
                "path": "/v1/chat/completions",  # a path is a request target: no escapes
                **(
                    {
                        "error": f"http_400{CLEAR}",
                        "error_message": f"<b>bold</b> [/bold] {HOSTILE} | <script>x</script>",
                    }
                    if failed
                    else {}
                ),
            }
        )
    header = {**HEADER, "source": f"replay{OSC52}", "speed": "1x"}
    return write_plain(tmp_path / "results.msgpack", maps, header)


def test_inspect_shows_archive_strings_escaped(tmp_path: Path) -> None:
    results = _results(tmp_path)
    code, out, err = _run("traces", "inspect", "-n", "3", str(results))
    assert code == 0, err
    assert _raw(out) == [] and "\\x1b]52;c;aGk=\\x07" in out and "\\rFAKE" in out


def test_stats_and_a_report_on_the_terminal_show_them_escaped(tmp_path: Path) -> None:
    results = _results(tmp_path)
    code, out, err = _run("traces", "stats", str(results))
    assert code == 0 and _raw(out + err) == [], err
    code, out, err = _run("report", "--replay-only", str(results))
    assert code == 0, err
    assert _raw(out + err) == []
    assert "[/bold]" in out  # shown as written, not taken for markup
    assert "\\x1b]52" in out


def test_markdown_cells_escape_html_and_pipes(tmp_path: Path) -> None:
    results = _results(tmp_path)
    md = tmp_path / "r.md"
    code, _, err = _run("report", "--replay-only", str(results), "--markdown", str(md))
    assert code == 0, err
    text = md.read_text()
    assert "<b>" not in text and "<script>" not in text
    assert "&lt;b&gt;bold&lt;/b&gt;" in text and "&lt;script&gt;" in text
    assert _raw(text) == []
    (row,) = [line for line in text.splitlines() if "bold" in line]
    assert "\\|" in row  # the message's pipe does not split its cell
    cells = re.split(r"(?<!\\)\|", row.strip())[1:-1]
    (header,) = [line for line in text.splitlines() if line.startswith("| kind |")]
    assert len(cells) == header.count("|") - 1


def test_an_error_line_shows_a_file_name_escaped(tmp_path: Path) -> None:
    code, _, err = _run("traces", "inspect", str(tmp_path / f"no{CLEAR}such"))
    assert code == 3 and _raw(err) == [] and "\\x1b[2J" in err


@pytest.mark.parametrize("status", [400, 503])
def test_a_targets_message_is_escaped_in_the_preflight_summary_and_error(
    tmp_path: Path, status: int
) -> None:
    async def refuse(request: web.Request) -> web.Response:
        await request.read()  # the message's escapes raw, not JSON's \u001b
        body = '{"error": {"message": "you shall not pass ' + HOSTILE + '", "type": "x"}}'
        return web.Response(text=body, status=status, content_type="application/json")

    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 30, gap_ms=5, seed=1)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    replay = [sys.executable, "-c", "from tailreplay.cli import replay_main; replay_main()"]
    with serve_in_thread(app) as url:
        args = ["--target", url, "--out", str(tmp_path / "r.msgpack"), str(archive)]
        done = subprocess.run([*replay, *args], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert _raw(done.stdout + done.stderr) == [], done.stdout + done.stderr
    assert "you shall not pass" in done.stdout + done.stderr
    assert "\\x1b]52" in done.stdout + done.stderr
    if status == 400:  # an API's own 4xx: the preflight passes and says what it answered
        assert "preflight: " in done.stderr
