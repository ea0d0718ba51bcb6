"""docs/quickstart.md as a new user meets it: its commands, run as written, from a
wheel installed in a fresh virtual environment, in an empty folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.helpers import REPO, free_port

QUICKSTART = REPO / "docs/quickstart.md"
PORTS = (8000, 8080, 9000, 9464)


def _script() -> str:
    """The doc's ``sh`` blocks in order, as one script, with its ports made free ones.

    The gate (the block before the last) may exit 1 only as the doc says it does on a
    machine too busy to send on time: its exit code is kept, and the clean-up runs.
    """
    blocks = re.findall(r"```sh\n(.*?)```", QUICKSTART.read_text(), flags=re.S)
    *setup, gate, cleanup = blocks
    assert gate.lstrip().startswith("replay ") and "--slo" in gate
    kept = f"set +e\n{gate.strip()}\necho gate exit $? >&2\nset -e\n"
    script = "\n".join([*setup, kept, cleanup])
    for port in PORTS:  # the doc's ports may be taken on a shared machine
        script = re.sub(rf"\b{port}\b", str(free_port()), script)
    # Whatever the script started in the background stops with it, pass or fail.
    return "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script


def _fresh_install(tmp: Path) -> Path:
    """A new venv holding the wheel built from this checkout; returns its bin/."""
    wheels = tmp / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    (wheel,) = wheels.glob("tailreplay-*.whl")
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True, timeout=300)
    # The dependencies come from the test environment (no index here): a path entry,
    # so this checkout's editable install there is not picked up.
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run(
        [str(venv / "bin/python"), "-c", purelib], check=True, capture_output=True, text=True
    ).stdout.strip()
    Path(site, "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def test_the_quickstart_runs_as_written_from_a_fresh_install(tmp_path: Path) -> None:
    assert shutil.which("curl"), "the quickstart uses curl to wait for servers"
    bin_dir = _fresh_install(tmp_path)
    work = tmp_path / "empty"
    work.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": ""}
    # Never this checkout: the commands must come from the wheel.
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import tailreplay; print(tailreplay.__file__)"],
        capture_output=True, text=True, env=env, cwd=work, check=True,
    ).stdout  # fmt: skip
    assert str(tmp_path / "venv") in where, where
    done = subprocess.run(
        ["bash", "-c", _script()], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in ("peak.msgpack", "first30s.msgpack", "capture.msgpack", "window.msgpack",
                 "report.html", "summary.json"):  # fmt: skip
        assert (work / name).stat().st_size > 0, name
    assert list((work / "captures").glob("capture-*.msgpack"))
    assert "preflight: POST http://127.0.0.1:" in done.stderr
    gate = re.findall(r"^gate exit (\d+)$", done.stderr, flags=re.M)
    if gate == ["0"]:
        assert "SLOs: score 1.00 (PASS)" in done.stdout, done.stdout[-2000:]
    else:  # the machine was too busy to measure staging, and the replay said so
        assert gate == ["1"], done.stderr[-2000:]
        assert "CLIENT-BOUND" in done.stdout and "SLO NOT JUDGED" in done.stdout
