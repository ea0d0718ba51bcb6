"""docs/quickstart.md as a new user meets it: its commands, run as written, from a
wheel installed in a fresh virtual environment, in an empty folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import REPO, free_port

QUICKSTART = REPO / "docs/quickstart.md"
PORTS = (8000, 8080, 9000, 9464)
_CLIENT_LATE = "SLO not judged: the client was the bottleneck"


def _script() -> str:
    """The doc's ``sh`` blocks in order, as one script, with its ports made free ones.

    The gate (the block before the last) exits with its verdict's code (0, 1 or 4, as the
    doc says): its exit code is kept, and the clean-up runs.
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


@pytest.fixture(scope="module")
def quickstart(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The quickstart's script run once from a fresh install: (the run, its folder)."""
    assert shutil.which("curl"), "the quickstart uses curl to wait for servers"
    tmp_path = tmp_path_factory.mktemp("quickstart")
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
    return _run(work, env), work


def _run(work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The quickstart's script, run in the empty folder ``work``."""
    return subprocess.run(
        ["bash", "-c", _script()], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )


def _gate(done: subprocess.CompletedProcess[str]) -> str:
    (code,) = re.findall(r"^gate exit (\d+)$", done.stderr, flags=re.M)
    return code


def test_the_quickstart_runs_as_written_from_a_fresh_install(
    quickstart: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, work = quickstart
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in ("peak.msgpack", "first30s.msgpack", "capture.msgpack", "window.msgpack",
                 "report.html", "summary.json"):  # fmt: skip
        assert (work / name).stat().st_size > 0, name
    assert list((work / "captures").glob("capture-*.msgpack"))
    assert "preflight: POST http://127.0.0.1:" in done.stderr
    # The gate exits with the code the doc gives its summary's verdict; which verdict
    # staging earns on this machine is the perf test below.
    slo = json.loads((work / "summary.json").read_text())["slo"]
    code = {"pass": "0", "fail": "1", "not_judged": "4"}[slo["state"]]
    assert _gate(done) == code, (slo, done.stderr[-2000:])
    headline = {"pass": "SLO PASS", "fail": "SLO FAIL", "not_judged": "SLO NOT JUDGED"}
    assert headline[slo["state"]] in done.stdout, done.stdout[-2000:]


@pytest.mark.perf
def test_the_quickstarts_gate_passes_staging(
    quickstart: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, work = quickstart
    env = {**os.environ, "PATH": f"{work.parent / 'venv/bin'}:{os.environ['PATH']}"}
    # A replay that left late is not judged (exit 4), rightly: on a shared machine a
    # neighbour's burst can hold the replayer past its lag limit for a few sends. The
    # warning says to replay on a quieter machine; this runs the quickstart again, at
    # most twice, and only then.
    for again in range(2):
        if _gate(done) != "4" or _CLIENT_LATE not in done.stderr:
            break
        folder = work.parent / f"again{again}"
        folder.mkdir()
        done = _run(folder, {**env, "PYTHONPATH": ""})
    assert _gate(done) == "0", done.stderr[-2000:]
    assert "SLOs: score 1.00 (PASS)" in done.stdout, done.stdout[-2000:]
