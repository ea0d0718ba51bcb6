"""The upstream guard compares addresses, not host strings: an archive captured from
``http://127.0.0.1:PORT`` is refused at every spelling of that server, and at the
upstreams of the proxy's routes; another port, or ``--allow-upstream``, is not."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.replayer.preflight import archive_upstreams, same_deployment
from tests.helpers import free_port, write_plain

T0 = 1_700_000_000 * 10**9
RECORD = {"start_ns": T0, "method": "POST", "path": "/v1/chat/completions", "model": "m",
          "input_tokens": 5, "output_tokens": 2}  # fmt: skip
PORT = free_port()
SPELLINGS = [
    "http://127.0.0.1:{port}",
    "http://localhost:{port}",
    "http://LOCALHOST:{port}",
    "http://localhost.:{port}",
    "http://127.1:{port}",
    "http://0x7f000001:{port}",
    "http://2130706433:{port}",
    "http://0177.0.0.1:{port}",
    "http://127.0.0.2:{port}",
    "http://0.0.0.0:{port}",
    "http://[::1]:{port}",
    "http://[::]:{port}",
    "http://[::ffff:127.0.0.1]:{port}",
    "http://[0:0:0:0:0:ffff:7f00:1]:{port}",
    "http://{hostname}:{port}/v1",
    "http://127.0.0.1:{port}/v1/",
]


def _url(spelling: str, port: int = PORT) -> str:
    return spelling.format(port=port, hostname=socket.gethostname())


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_the_captured_upstream_is_the_same_deployment(spelling: str) -> None:
    upstream = f"http://127.0.0.1:{PORT}"
    assert same_deployment(_url(spelling), [upstream]) == upstream
    assert same_deployment(_url(spelling, PORT + 1), [upstream]) is None


def test_a_default_port_is_the_schemes() -> None:
    assert same_deployment("http://localhost", ["http://127.0.0.1:80/v1"]) is not None
    assert same_deployment("https://localhost", ["http://127.0.0.1:80"]) is None


def test_the_routes_upstreams_are_guarded_too() -> None:
    header = {"upstream": "http://127.0.0.1:1", "capture": {"routes": {"/v1/embeddings":
              f"http://127.0.0.1:{PORT}"}}}  # fmt: skip
    assert archive_upstreams(header) == ["http://127.0.0.1:1", f"http://127.0.0.1:{PORT}"]


@pytest.mark.parametrize("spelling", SPELLINGS[:6] + SPELLINGS[10:14])
def test_replay_refuses_the_upstream_however_spelled(tmp_path: Path, spelling: str) -> None:
    header = {"format": "tailreplay", "version": 1, "created_ns": T0, "source": "proxy",
              "upstream": f"http://user:secret@127.0.0.1:{PORT}/v1"}  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", [RECORD], header)
    args = ["replay", "--target", _url(spelling), "--out", str(tmp_path / "r.msgpack")]
    done = CliRunner().invoke(cli, [*args, str(archive)])
    assert done.exit_code == 2, done.output
    assert "is the upstream this archive was captured from" in done.stderr
    assert "secret" not in done.stderr


def test_a_route_upstream_is_refused_and_allow_upstream_lets_it_through(tmp_path: Path) -> None:
    header = {"format": "tailreplay", "version": 1, "created_ns": T0, "source": "proxy",
              "upstream": "http://10.255.255.1:8000",
              "capture": {"routes": {"/v1/embeddings": f"http://localhost:{PORT}"}}}  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", [RECORD], header)
    base = ["replay", "--target", f"http://127.0.0.1:{PORT}", "--no-preflight",
            "--out", str(tmp_path / "r.msgpack")]  # fmt: skip
    refused = CliRunner().invoke(cli, [*base, str(archive)])
    assert refused.exit_code == 2 and "captured from" in refused.stderr
    # Allowed, it is sent (nothing listens there: a connect error, not a refusal).
    allowed = CliRunner().invoke(cli, [*base, "--allow-upstream", "--fail-fast", "0", str(archive)])
    assert "captured from" not in allowed.stderr
    assert "errors: connect 1" in allowed.output, allowed.output
