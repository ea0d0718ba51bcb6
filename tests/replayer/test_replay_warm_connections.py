"""The connections a replay opens before its start are the first burst's, no more: a
server that gives each connection a worker from a small pool (llama.cpp's server, many
thread-per-connection servers) keeps a worker on an idle connection until its
keep-alive ends, and requests on the others wait for one."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import write_plain

WORKERS = 2
KEEP_ALIVE_S = 4.0
T0 = 1_700_000_000 * 10**9


@asynccontextmanager
async def pooled_server() -> AsyncIterator[str]:
    """An HTTP/1.1 server that serves ``WORKERS`` connections at a time, each until it
    has been idle ``KEEP_ALIVE_S`` (as cpp-httplib's thread pool does); any other
    connection waits, accepted, for a worker. Each request gets a chat answer at once."""
    workers = asyncio.Semaphore(WORKERS)
    answer = json.dumps({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }).encode()  # fmt: skip

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with workers:
            try:
                while True:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), KEEP_ALIVE_S)
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":", 1)[1])
                    await reader.readexactly(length)
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                        + answer
                    )
                    await writer.drain()
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


async def test_a_sparse_schedule_opens_no_connection_a_small_pool_would_hold(
    tmp_path: Path,
) -> None:
    chat = {"method": "POST", "path": "/v1/chat/completions", "stream": False,
            "input_tokens": 20, "output_tokens": 1}  # fmt: skip
    archive = write_plain(
        tmp_path / "a.msgpack", [{"start_ns": T0 + i * 5 * 10**8, **chat} for i in range(4)]
    )
    out = tmp_path / "r.msgpack"
    async with pooled_server() as url:
        cmd = [sys.executable, "-m", "tailreplay", "replay", str(archive), "--target", url,
               "--out", str(out), "--tail-stretch", "1", "--lag-limit", "1h"]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    results = list(ArchiveReader([out]))
    assert len(results) == 4 and all(r.status == 200 for r in results)
    # Answered at once; a request that waited for a worker held by an idle warm
    # connection would take the keep-alive's 4 s (a busy machine adds far less).
    slowest_s = max(r.duration_ns for r in results) / 1e9
    assert slowest_s < KEEP_ALIVE_S / 2, slowest_s
