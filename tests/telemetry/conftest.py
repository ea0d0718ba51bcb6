"""Real receivers for the telemetry tests: Arize Phoenix (OTLP) and Prometheus.

``make test-telemetry`` installs them (Phoenix into .venv-phoenix, ~850 MB;
Prometheus from Debian) and runs these tests inside a private network
namespace when it can: Phoenix's gRPC port binds every interface, and in a
namespace of our own "every interface" is only loopback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import free_port

PHOENIX = os.environ.get("TAILREPLAY_PHOENIX")
PROMETHEUS = os.environ.get("TAILREPLAY_PROMETHEUS") or shutil.which("prometheus")
IN_NETNS = os.environ.get("TAILREPLAY_NETNS") == "1"


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url}: not up after {timeout_s:.0f} s: {log.read_text()[-2000:]}")


class Phoenix:
    def __init__(self, http_port: int, grpc_port: int) -> None:
        self.base = f"http://127.0.0.1:{http_port}"
        self.traces = f"{self.base}/v1/traces"
        self.grpc = f"http://127.0.0.1:{grpc_port}"

    def spans(self, project: str, expect: int, timeout_s: float = 30) -> list[dict]:
        """Every span of ``project`` (pages followed), once ``expect`` have arrived."""
        import json

        deadline = time.monotonic() + timeout_s
        while True:
            out: list[dict] = []
            cursor = None
            while True:
                url = f"{self.base}/v1/projects/{project}/spans?limit=1000"
                if cursor:
                    url += f"&cursor={cursor}"
                try:
                    with urllib.request.urlopen(url, timeout=10) as r:
                        page = json.load(r)
                except OSError:  # the project does not exist until its first span
                    page = {"data": [], "next_cursor": None}
                out += page["data"]
                cursor = page.get("next_cursor")
                if not cursor:
                    break
            if len(out) >= expect or time.monotonic() > deadline:
                return out
            time.sleep(0.5)


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    if not PHOENIX:
        pytest.skip("Arize Phoenix not installed: run `make test-telemetry`")
    work = tmp_path_factory.mktemp("phoenix")
    http_port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(http_port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = work / "phoenix.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([PHOENIX, "serve"], env=env, stdout=out, stderr=out)
    try:
        wait_http(f"http://127.0.0.1:{http_port}/healthz", proc, 120, log)
        yield Phoenix(http_port, grpc_port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
