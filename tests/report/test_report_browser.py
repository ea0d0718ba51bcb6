"""The HTML report in a real browser: Debian's Chromium, headless, opens a report of a
real replay (with the target's metrics scraped) without a console error, and its
screenshot shows every plot drawn: pixels of each line's colour where the charts are."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from tailreplay.cli import cli
from tailreplay.sim.launcher import sim_process
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (make test installs it)")

# The lines' colours (report/html.py): the replayed side's, the target's requests
# running, its KV-cache usage.
LINES = {"replayed": (0xD6, 0x27, 0x28), "running": (0x2C, 0xA0, 0x2C),
         "kv_cache_usage": (0x94, 0x67, 0xBD)}  # fmt: skip


def test_the_html_report_opens_in_chromium_and_draws_its_plots(tmp_path: Path) -> None:
    rng = random.Random(3)
    maps = [{"start_ns": T0 + int(i / 40 * 1e9), "trace_id": rng.randbytes(16),
             "span_id": rng.randbytes(8), "method": "POST", "path": "/v1/chat/completions",
             "model": "m", "stream": True, "input_tokens": rng.randint(100, 800),
             "output_tokens": rng.randint(5, 30), "duration_ns": rng.randint(10**8, 10**9)}
            for i in range(200)]  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", maps)
    out, html = tmp_path / "r.msgpack", tmp_path / "report.html"
    with sim_process(["--profile", "fast"]) as url:
        result = CliRunner().invoke(cli, ["replay", "--target", url, "--scrape", "target@200ms",
                                          "--out", str(out), "--lag-limit", "100ms",
                                          "--report", str(html), str(archive)])  # fmt: skip
    assert result.exit_code == 0, result.output
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0", f"--screenshot={shot}",
         "--window-size=1280,6000", html.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    # The page's own console: Chromium logs it as CONSOLE lines (its D-Bus noise is not).
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    assert console == []
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)
    for name, color in LINES.items():
        drawn = int((np.abs(pixels - np.array(color)) <= 40).all(axis=2).sum())
        assert drawn > 500, f"the {name} line is not drawn ({drawn} pixels)"


def _polyline_xs(svg: str, color: str) -> list[float]:
    """The x coordinates of every polyline drawn in ``color`` in one chart's SVG."""
    out: list[float] = []
    for points in re.findall(rf'<polyline points="([^"]+)" fill="none" stroke="{color}"', svg):
        out += [float(p.split(",")[0]) for p in points.split()]
    return out


def test_a_2x_report_says_how_it_was_run_and_aligns_its_time_axes(tmp_path: Path) -> None:
    rng = random.Random(4)
    maps = [
        {
            "start_ns": T0 + int(i / 40 * 1e9),
            "trace_id": rng.randbytes(16),
            "span_id": rng.randbytes(8),
            "method": "POST",
            "path": "/v1/chat/completions",
            "model": "m",
            "stream": True,
            "input_tokens": rng.randint(100, 800),
            "output_tokens": rng.randint(5, 30),
            "duration_ns": rng.randint(10**8, 10**9),
        }
        for i in range(400)
    ]
    archive = write_plain(tmp_path / "a.msgpack", maps)
    out, html, md = tmp_path / "r.msgpack", tmp_path / "report.html", tmp_path / "report.md"
    with sim_process(["--profile", "fast"]) as url:
        args = ["--target", url, "--speed", "2x", "--seed", "7", "--lag-limit", "100ms"]
        args += ["--header", "Authorization: Bearer sk-secret-abcdefghijklmnop"]
        result = CliRunner().invoke(
            cli, ["replay", *args, "--out", str(out), "--report", str(html), str(archive)]
        )
        assert result.exit_code == 0, result.output
        md_result = CliRunner().invoke(cli, ["report", str(out), "--markdown", str(md)])
        assert md_result.exit_code == 0, md_result.output
    page = html.read_text()
    # The run's record, first: what, at what, when, by which version, how.
    for text in (
        "<h2>run</h2>",
        f"<td>target</td><td>{url}</td>",
        "<td>--speed</td><td>2x</td>",
        "<td>--seed</td><td>7</td>",
        "<td>tailreplay</td><td>0.",
        " UTC</td>",
        "<td>--tail-stretch</td><td>x1.8 at or above the recorded P99</td>",
        "Authorization: ***",
    ):
        assert text in page, text
    assert "sk-secret" not in page and "sk-secret" not in md.read_text()
    assert "| --speed | 2x |" in md.read_text()
    # On one clock: the recorded 10 s end where the replay's 5 s do.
    chart = page[page.index("latency over time") :]
    chart = chart[: chart.index("</svg>")]
    recorded, replayed = _polyline_xs(chart, "#1f77b4"), _polyline_xs(chart, "#d62728")
    assert recorded and replayed
    assert abs(max(recorded) - max(replayed)) < 0.1 * (640 - 64 - 16)
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            f"--screenshot={shot}",
            "--window-size=1280,4000",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    assert [line for line in done.stderr.splitlines() if "CONSOLE" in line] == []
