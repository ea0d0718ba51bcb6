"""An archive cannot make the replayer write a request it did not mean: a method or
path that would split the request line (CR/LF) or point it at another host (absolute
form, ``@host``, ``//host``) is damage to every reader, and the transport refuses to
write one even when handed it directly. A raw socket target logs every byte it gets."""

from __future__ import annotations

import asyncio
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.replayer.request import RequestSpec
from tailreplay.replayer.transport import HttpTransport
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9
REPLY = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}'
GOOD = {"method": "POST", "path": "/v1/chat/completions", "model": "m", "stream": False,
        "input_tokens": 5, "output_tokens": 2}  # fmt: skip
INJECTIONS = [
    {"method": "POST", "path": "/v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"
                               "DELETE /admin/users HTTP/1.1\r\nX-Injected: 1"},
    {"method": "DELETE /admin/users HTTP/1.1\r\nX-Injected: 1\r\n\r\nPOST", "path": "/v1/x"},
    {"method": "GET", "path": "http://169.254.169.254/latest/meta-data/"},
    {"method": "GET", "path": "@169.254.169.254/latest"},
    {"method": "GET", "path": "//169.254.169.254/latest"},
    {"method": "GET", "path": "/a\x00b"},
]  # fmt: skip


class _Log(socketserver.BaseRequestHandler):
    """Answers each request (head, then Content-Length bytes) with 200; keeps every byte."""

    def handle(self) -> None:
        buf = b""
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.server.received.append(data)  # type: ignore[attr-defined]
            buf += data
            while b"\r\n\r\n" in buf:
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(rest) < length:
                    break
                buf = rest[length:]
                self.server.heads.append(head)  # type: ignore[attr-defined]
                self.request.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%b" % (len(REPLY), REPLY)
                )


@pytest.fixture
def raw_target() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Log)
    server.daemon_threads = True
    server.received, server.heads = [], []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server  # type: ignore[misc]
    finally:
        server.shutdown()
        server.server_close()


def _archive(tmp_path: Path, bad: dict[str, Any]) -> Path:
    maps = [{**GOOD, "start_ns": T0 + i * 10**7, "trace_id": bytes([i + 1]) * 16} for i in range(5)]
    maps[2].update(bad)
    return write_plain(tmp_path / "a.msgpack", maps)


def _url(server: socketserver.ThreadingTCPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("bad", INJECTIONS, ids=lambda b: repr(b["method"] + b["path"])[:30])
def test_a_record_that_would_inject_is_refused_and_never_sent(
    tmp_path: Path, raw_target: socketserver.ThreadingTCPServer, bad: dict[str, Any]
) -> None:
    target, received = _url(raw_target), raw_target.received  # type: ignore[attr-defined]
    archive = _archive(tmp_path, bad)
    base = ["replay", "--target", target, "--header", "Authorization: Bearer staging-key",
            "--no-preflight", "--speed", "10x"]  # fmt: skip
    refused = CliRunner().invoke(cli, [*base, "--out", str(tmp_path / "r1.msgpack"), str(archive)])
    assert refused.exit_code == 3, refused.output
    assert "corrupt archive" in refused.stderr and "\r" not in refused.stderr
    assert received == []  # refused before anything was sent
    skipped = CliRunner().invoke(
        cli, [*base, "--skip-corrupt", "--out", str(tmp_path / "r2.msgpack"), str(archive)]
    )
    assert skipped.exit_code == 0, skipped.output
    lines = [head.split(b"\r\n")[0] for head in raw_target.heads]  # type: ignore[attr-defined]
    assert lines == [b"POST /v1/chat/completions HTTP/1.1"] * 4, lines
    everything = b"".join(received)
    assert b"X-Injected" not in everything and b"169.254" not in everything
    assert everything.count(b"Authorization: Bearer staging-key") == 4


@pytest.mark.parametrize("bad", INJECTIONS, ids=lambda b: repr(b["method"] + b["path"])[:30])
def test_the_transport_refuses_to_write_an_unsafe_request_line(
    raw_target: socketserver.ThreadingTCPServer, bad: dict[str, Any]
) -> None:
    """Defence in depth: a spec built in memory (the API, a bug) never reaches the socket."""
    target, received = _url(raw_target), raw_target.received  # type: ignore[attr-defined]

    async def send() -> Any:
        transport = HttpTransport(target, connections=4, timeout_s=5)
        try:
            spec = RequestSpec(bad["method"], bad["path"], b"{}", False, None)
            return await transport.send(spec, {"Authorization": "Bearer staging-key"})
        finally:
            await transport.close()

    outcome = asyncio.run(send())
    assert outcome.error == "bad_request" and outcome.status == 0
    assert "\r" not in outcome.error_text and "\n" not in outcome.error_text
    assert received == []
