"""A replay's spans never hold its exit past the documented bound (``CLOSE_S``, 5 s),
whatever the collector does: accepts and never answers, answers half a response and
stalls, or refuses. ``--otlp-timeout 30s`` lets the exporter wait that long on one
request, so only the bound itself can end the run in time."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailreplay.exporters.span_process import CLOSE_S
from tailreplay.sim.launcher import sim_process
from tests.helpers import chat_archive, free_port

MARGIN_S = 3.0
"""A busy 2-core machine's room: process exit and scheduling, beyond the bound."""


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with sim_process(["--profile", "fast", "--max-num-seqs", "256"]) as url:
        yield url


@contextlib.contextmanager
def _collector(behaviour: str) -> Iterator[str]:
    """An OTLP/HTTP endpoint on 127.0.0.1 that misbehaves: ``hung`` accepts and never
    reads nor answers; ``stalled`` reads the request and sends part of a response;
    ``refused`` listens nowhere."""
    if behaviour == "refused":
        yield f"http://127.0.0.1:{free_port()}/v1/traces"
        return
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            held.append(conn)  # kept open: the client waits on it
            if behaviour == "stalled":
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1/traces"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def _timed_replay(archive: Path, out: Path, sim: str, *extra: str) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", "--speed", "10x", "--target", sim,
         "--no-preflight", "--out", str(out), *extra, str(archive)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return took, done.stderr


@pytest.mark.parametrize("behaviour", ["hung", "stalled", "refused"])
def test_a_bad_collector_holds_the_exit_no_longer_than_the_bound(
    tmp_path: Path, sim: str, behaviour: str
) -> None:
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 40, gap_ms=10, seed=5)
    plain, _ = _timed_replay(archive, tmp_path / "plain.msgpack", sim)
    with _collector(behaviour) as url:
        traced, err = _timed_replay(
            archive, tmp_path / "traced.msgpack", sim,
            "--otlp-endpoint", url, "--otlp-timeout", "30s",
        )  # fmt: skip
    print(f"{behaviour}: {plain:.2f} s without OTLP, {traced:.2f} s with it")
    assert traced <= plain + CLOSE_S + MARGIN_S, (plain, traced)
    assert "Traceback" not in err
    # Said in one line: nothing delivered (or, killed at the bound, not known).
    spans = [line for line in err.splitlines() if line.startswith("spans: ")]
    assert len(spans) == 1 and (" 0 exported" in spans[0] or "unknown" in spans[0]), err
