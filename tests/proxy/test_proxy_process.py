"""The proxy as a process: kill -9 under load, SIGTERM with streams in flight, workers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tests.proxy_helpers import start_proxy_process

FLUSH_S = 1.0  # the proxy's flush interval
SLACK_S = 1.0  # a busy CI machine's scheduling delays, on top of it


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with sim_process(
        ["--decode-base-ms", "10", "--prefill-base-ms", "1", "--output-mean", "10"]
    ) as url:
        yield url


def _start_proxy(upstream: str, out: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str, str]:
    return start_proxy_process(upstream, out, *extra)


def _records(out: Path) -> list:
    return list(ArchiveReader(sorted(out.glob("*.msgpack"))))


async def test_kill_9_under_load_loses_at_most_the_flush_interval(
    tmp_path: Path, sim_url: str
) -> None:
    out = tmp_path / "out"
    proc, url, _ = _start_proxy(sim_url, out)
    done: list[tuple[float, str]] = []  # (wall time completed, trace id hex)
    stop = time.monotonic() + 5.0
    try:
        async with aiohttp.ClientSession() as s:

            async def client(n: int) -> None:
                i = 0
                while time.monotonic() < stop:  # bounded in time
                    tid = os.urandom(16).hex()
                    headers = {"traceparent": f"00-{tid}-{os.urandom(8).hex()}-01"}
                    body = {"model": "m", "messages": [{"role": "user", "content": f"{n} {i}"}]}
                    try:
                        async with s.post(
                            url + "/v1/chat/completions", json=body, headers=headers
                        ) as r:
                            await r.read()
                            if r.status == 200:
                                done.append((time.time(), tid))
                    except aiohttp.ClientError:
                        return
                    i += 1

            tasks = [asyncio.create_task(client(n)) for n in range(8)]
            await asyncio.sleep(4.0)
            killed_at = time.time()
            proc.send_signal(signal.SIGKILL)
            await asyncio.gather(*tasks)
    finally:
        proc.kill()
        proc.wait()
    recorded = {r.trace_id.hex() for r in _records(out)}  # readable after kill -9
    must_have = [tid for t, tid in done if t < killed_at - FLUSH_S - SLACK_S]
    assert len(must_have) > 50
    missing = [tid for tid in must_have if tid not in recorded]
    assert not missing, f"{len(missing)} records older than the flush interval were lost"


async def test_sigterm_lets_streams_in_flight_finish_and_records_them(
    tmp_path: Path, sim_url: str
) -> None:
    out = tmp_path / "out"
    proc, url, _ = _start_proxy(sim_url, out, "--drain-timeout", "20s")
    body = {
        "model": "m", "messages": [{"role": "user", "content": "long"}], "stream": True,
        "max_tokens": 100, "ignore_eos": True,
    }  # fmt: skip
    try:
        async with aiohttp.ClientSession() as s:

            async def stream() -> bytes:
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    return await r.read()

            tasks = [asyncio.create_task(stream()) for _ in range(6)]
            await asyncio.sleep(0.4)  # all six are mid-stream (100 tokens x 10 ms)
            proc.send_signal(signal.SIGTERM)
            bodies = await asyncio.gather(*tasks)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert all(b.endswith(b"data: [DONE]\n\n") for b in bodies)
    recs = _records(out)
    assert len(recs) == 6
    assert all(r.error is None and r.output_tokens == 100 for r in recs)


async def test_two_workers_share_the_port_and_their_metrics(tmp_path: Path, sim_url: str) -> None:
    out = tmp_path / "out"
    proc, url, admin = _start_proxy(sim_url, out, "--workers", "2")
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            for i in range(60):
                body = {"model": "m", "messages": [{"role": "user", "content": str(i)}]}
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200
                    await r.read()
            async with s.get(admin + "/metrics") as r:
                text = await r.text()
        total = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("tailreplay_proxy_requests_total{")
        )
        assert total == 60
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    files = sorted(out.glob("*.msgpack"))
    pids = {f.name.split("-")[-2] for f in files}
    assert len(pids) == 2  # one archive series per worker
    assert len(_records(out)) == 60
    # The parent's last word counts every worker's records.
    assert proc.stdout is not None
    last = proc.stdout.read().decode().strip().splitlines()[-1]
    assert last == f"archives closed in {out}/: 60 exchanges served: 60 records written, 0 dropped"


def test_an_unusable_out_directory_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = subprocess.run(
        [sys.executable, "-m", "tailreplay", "proxy", "--upstream", "http://127.0.0.1:9",
         "--listen", "127.0.0.1:0", "--admin-listen", "off", "--out", str(blocker / "sub")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and "cannot create it" in lines[0]


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("flag", ["--listen", "--admin-listen"])
def test_a_port_in_use_is_one_line_exit_2_and_leaves_no_capture(
    tmp_path: Path, flag: str, workers: str
) -> None:
    """With --workers 2 too: no worker is started (none left serving, none orphaned)."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = f"127.0.0.1:{busy.getsockname()[1]}"
        with socket.socket() as free:  # workers share a fixed port
            free.bind(("127.0.0.1", 0))
            listen = f"127.0.0.1:{free.getsockname()[1]}"
        ports = {"--listen": listen, "--admin-listen": "127.0.0.1:0", flag: taken}
        out = subprocess.run(
            [sys.executable, "-m", "tailreplay", "proxy", "--upstream", "http://127.0.0.1:9",
             *(x for kv in ports.items() for x in kv), "--out", str(tmp_path / "c"),
             "--workers", workers],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{flag} {taken}:" in lines[0], out.stderr
    assert not (tmp_path / "c").exists()  # nothing recorded, not even a folder made


def test_an_ipv6_listen_address_is_printed_as_a_url_that_pastes_back(tmp_path: Path) -> None:
    import re
    import socket

    from tailreplay.units import parse_http_url

    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailreplay", "proxy", "--upstream", "http://127.0.0.1:9",
         "--listen", "[::1]:0", "--admin-listen", "[::1]:0", "--out", str(tmp_path / "c")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(30)
    urls = re.findall(r"https?://\S+", line)
    assert urls and all(u.startswith("http://[::1]:") for u in urls[:1]), line
    assert parse_http_url(urls[0], "--target").host == "::1"


def test_only_a_listener_open_beyond_loopback_is_warned_of() -> None:
    # The warning itself needs a non-loopback bind, which tests here never make: the
    # judgement it rests on is checked instead.
    from tailreplay.cli.proxy import _loopback

    for host in ("127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"):
        assert _loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.7", "192.168.1.2", "proxy.internal", ""):
        assert not _loopback(host), host
