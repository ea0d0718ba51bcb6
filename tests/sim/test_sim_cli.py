"""`tailreplay sim` flags: wrong values are one line and exit 2; a busy port is one line."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.sim.batching import Engine, NeverFits, QueueFull
from tailreplay.sim.profiles import PROFILES


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "8000"], "invalid --listen"),
        (["--profile", "huge"], "'huge' is not one of 'default', 'fast', nor a file (no such"),
        (["--fault-error-rate", "2"], "error_rate must be between 0 and 1"),
        (["--max-num-seqs", "many"], "is not a valid integer"),
    ],
)
def test_bad_flags_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["sim", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_busy_port_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "tailreplay.sim", "--listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 2  # the --listen given cannot be used, as for the proxy
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--listen 127.0.0.1:{port}: cannot listen" in lines[0], out.stderr


async def test_engine_refuses_what_can_never_fit_and_a_full_queue() -> None:
    p = PROFILES["default"].with_overrides(queue_limit=1, max_num_seqs=1)
    engine = Engine(p)
    with pytest.raises(NeverFits, match="maximum context length is 8192"):
        engine.submit(8000, 500)
    engine.submit(10, 5)  # waits (the engine is not started)
    with pytest.raises(QueueFull):
        engine.submit(10, 5)


async def test_engine_preempts_when_kv_runs_out() -> None:
    # Room for two 40-token prompts but not for both to grow by 30 tokens.
    p = PROFILES["default"].with_overrides(
        kv_tokens=100, decode_base_ms=0.5, decode_per_seq_ms=0.0, prefill_base_ms=0.5,
        prefill_per_token_ms=0.0, max_model_len=100,
    )  # fmt: skip
    engine = Engine(p)
    engine.start()
    try:
        a, b = engine.submit(40, 30), engine.submit(40, 30)
        for seq in (a, b):
            while await seq.next_tokens():
                pass
        assert a.generated == b.generated == 30
        assert engine.stats.preemptions >= 1
        assert engine.kv_used == 0 and not engine.running
    finally:
        await engine.stop()


def _state(pid: int) -> str | None:
    """A process's state letter ("Z": exited, not yet reaped), None when gone."""
    try:
        # The command may hold spaces and parentheses: the fields follow the last ")".
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    found.append(int(entry.name))
    return found


def test_a_launcher_killed_outright_leaves_no_simulator_behind() -> None:
    # A launcher (replay, capacity, validate-model) that gets SIGKILL runs no cleanup: its
    # simulator, in a session of its own, sees its parent go and stops by itself.
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from tailreplay.sim.launcher import sim_process\n"
         "with sim_process(['--profile', 'fast']) as url:\n"
         "    print(url, flush=True); time.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert launcher.stdout is not None
        assert launcher.stdout.readline().startswith("http://127.0.0.1:")
        (sim,) = _children(launcher.pid)
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 30
    while _state(sim) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _state(sim) in (None, "Z"), f"the simulator (pid {sim}) outlived its launcher by 30 s"
