"""A target that answers every request at once, whatever its size, in its own process.

For replays whose subject is the replayer's own timing: the built-in simulator would
spend seconds on the prefill of each 100k-token prompt (and tokenise ~650 KB for its
count), so requests would pile up in flight and its CPU would compete with the
replayer's on a small machine. This one reads the body (so the replayer really
writes it) and answers a fixed non-streamed chat completion without ``usage`` (no
usage: the replayer's prompt-length correction stays at 1, prompts keep their size).
It runs niced, as the built-in simulator does.

Run: ``python -m tests.instant_target PORT``; ``instant_target()`` does it for a test.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from aiohttp import web

REPLY = (
    b'{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},'
    b'"finish_reason":"stop"}]}'
)


async def _answer(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=REPLY, content_type="application/json")


def _app() -> web.Application:
    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_route("*", "/{tail:.*}", _answer)
    return app


@contextlib.contextmanager
def instant_target(timeout_s: float = 20.0) -> Iterator[str]:
    """Start the target in a child process; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "tests.instant_target", str(port)], cwd=root)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the instant target did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    # Niced, as the built-in simulator is: on a small machine the target stands in for
    # one elsewhere and must not take the replayer's core when a long body wakes it.
    os.nice(5)
    web.run_app(_app(), host="127.0.0.1", port=int(sys.argv[1]), print=None)
