"""SIGTERM ends a command as Ctrl-C does: one line, exit 130, no partial output left."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import REPO

PEAK = REPO / "traces" / "peak.msgpack"


def test_sigterm_mid_synth_exits_130_and_leaves_no_part_file(tmp_path: Path) -> None:
    model, out = tmp_path / "m.json", tmp_path / "s.msgpack"
    tailreplay = [sys.executable, "-m", "tailreplay"]
    fit = subprocess.run([*tailreplay, "traces", "fit", str(PEAK), "-o", str(model)],
                         capture_output=True, timeout=120)  # fmt: skip
    assert fit.returncode == 0, fit.stderr
    # Five million records: tens of seconds of writing, stopped once the writing shows.
    synth = subprocess.Popen(
        [*tailreplay, "traces", "synth", str(model), "-o", str(out), "--rate", "1e6",
         "--duration", "5s"],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    part = tmp_path / f".{out.name}.part"
    deadline = time.monotonic() + 60
    while not part.exists() and synth.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert part.exists(), "synth wrote no partial archive to stop in the middle of"
    synth.send_signal(signal.SIGTERM)
    _, err = synth.communicate(timeout=60)
    assert synth.returncode == 130, err
    assert err.decode().strip().splitlines() == ["interrupted"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]
