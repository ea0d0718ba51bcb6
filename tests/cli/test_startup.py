"""A replay starts without what only some runs use: every trial of ``capacity`` and
``validate-model`` is a ``replay`` process, and aiohttp and the OpenTelemetry SDK took
0.25 s of each one's start (docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import chat_archive

PROBE = """
import sys
from tailreplay.cli import cli
try:
    cli(sys.argv[1:], prog_name="tailreplay")
except SystemExit:
    pass
heavy = sorted(m for m in ("aiohttp", "opentelemetry.sdk") if m in sys.modules)
print("loaded:", ",".join(heavy) or "-", file=sys.stderr)
"""


def _loaded(*args: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    line = next(x for x in done.stderr.splitlines() if x.startswith("loaded:"))
    return line.removeprefix("loaded:").strip()


def test_a_plain_replay_loads_neither_aiohttp_nor_the_otel_sdk(tmp_path: Path) -> None:
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 5, gap_ms=10, seed=1)
    assert _loaded("replay", "--dry-run", str(archive)) == "-"


def test_the_options_that_need_them_still_load_them(tmp_path: Path) -> None:
    """The probe can see a load: --metrics-listen serves with aiohttp's server. A
    --scrape (of nothing listening, at 100 ms) reads with the replay's own client."""
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 3, gap_ms=10, seed=1)
    common = ["replay", "--target", "http://127.0.0.1:9", "--no-preflight", str(archive)]
    scraped = _loaded(*common, "--scrape", "http://127.0.0.1:9/metrics@100ms",
                      "--out", str(tmp_path / "r.msgpack"))  # fmt: skip
    assert scraped == "-"
    served = _loaded(*common, "--metrics-listen", "127.0.0.1:0",
                     "--out", str(tmp_path / "s.msgpack"))  # fmt: skip
    assert "aiohttp" in served.split(",")
