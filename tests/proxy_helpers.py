"""Running the proxy in tests: in-process against a given upstream, records read after."""

from __future__ import annotations

import asyncio
import functools
import queue
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
    suppress,
)
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from yarl import URL

from tailreplay.exporters.spans import proxy_spans
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.server import RunningProxy, start
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record

T = TypeVar("T")


def start_proxy_process(
    upstream: str, out: Path, *extra: str, preexec_fn: Callable[[], None] | None = None
) -> tuple[subprocess.Popen[bytes], str, str]:
    """``tailreplay proxy`` as a process; returns it, its URL and its admin URL."""
    from tests.helpers import free_port

    port, admin = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "tailreplay", "proxy", "--upstream", upstream,
            "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
            "--out", str(out), *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=preexec_fn,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline().decode()
    if "listening on" not in line:
        proc.kill()
        raise AssertionError(line + proc.stderr.read().decode())
    return proc, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"


@asynccontextmanager
async def proxy_to(upstream: str, out: Path, **overrides: Any) -> AsyncIterator[RunningProxy]:
    config = ProxyConfig(
        upstream=URL(upstream), listen_port=0, admin_port=0, out_dir=out, flush_interval_s=0.1
    )
    options = overrides.pop("otlp", None)
    for k, v in overrides.items():
        setattr(config, k, v)
    if options is not None:  # as `tailreplay proxy --otlp-endpoint ...` does
        config.spans = functools.partial(
            proxy_spans, options, (config.listen_host, 0), sampling_key=config.sampling_key
        )
    async with start(config) as proxy:
        yield proxy


def records(out: Path) -> list[Record]:
    files = sorted(out.glob("*.msgpack*"))
    return list(ArchiveReader(files)) if files else []


@asynccontextmanager
async def serve_app(app: web.Application, **options: Any) -> AsyncIterator[str]:
    """``app`` on 127.0.0.1; ``options`` go to aiohttp's server (``auto_decompress``)."""
    runner = web.AppRunner(app, access_log=None, **options)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@contextmanager
def in_thread(manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
    """Enter an async context manager on its own loop in a thread (for tests that call
    asyncio.run themselves, or run the CLI through CliRunner)."""
    loop = asyncio.new_event_loop()
    ready: queue.Queue[T] = queue.Queue()
    stop = asyncio.Event()

    async def main() -> None:
        async with manager as value:
            ready.put(value)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        yield ready.get(timeout=10)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)


def serve_in_thread(app: web.Application) -> AbstractContextManager[str]:
    """Serve ``app`` on its own loop in a thread."""
    return in_thread(serve_app(app))


def recorder_pid(proxy_pid: int) -> int:
    """The proxy's child started by multiprocessing's spawn (not its resource tracker)."""
    children = Path(f"/proc/{proxy_pid}/task/{proxy_pid}/children").read_text().split()
    for pid in map(int, children):
        with suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    raise AssertionError(f"no recorder among the proxy's children {children}")


_EXIT_LINE = re.compile(
    r"archives closed in .*: ([\d,]+) exchanges served(?: \([\d,]+ of them copies to the "
    r"shadow(?:, [\d,]+ failed there)?(?:, [\d,]+ unfinished when the proxy stopped)?"
    r"(?:, [\d,]+ cut at a bound)?"
    r"(?:; [\d,]+ more not sent: [^)]*)?\))?: "
    r"([\d,]+) records written"
    r"(?: \([\d,]+ shed: [^)]*\))?, ([\d,]+) dropped"
    r"(?:; [\d,]+ of [\d,]+ answers were 404 \([^)]*\))?$"
)


def exit_line_counts(stdout: bytes) -> tuple[int, int, int]:
    """Served, written and dropped, from the proxy's last line of output."""
    last = stdout.decode().strip().splitlines()[-1]
    found = _EXIT_LINE.match(last)
    assert found, last
    served, written, dropped = (int(g.replace(",", "")) for g in found.groups())
    return served, written, dropped


@asynccontextmanager
async def held_upstream(release: asyncio.Event, *routes: tuple[str, str]) -> AsyncIterator[str]:
    """An upstream whose every answer (``{"ok": true}`` on each (method, path) of
    ``routes``) waits for ``release``, at most 20 s: its requests hold their
    connections busy until then."""

    async def held(request: web.Request) -> web.Response:
        await asyncio.wait_for(release.wait(), 20)  # bounded
        return web.json_response({"ok": True})

    app = web.Application()
    for method, path in routes:
        app.router.add_route(method, path, held)
    async with serve_app(app) as url:
        yield url


@asynccontextmanager
async def echo_upstream() -> AsyncIterator[str]:
    """An upstream that reads any chat request (up to 32 MiB) and answers "ok" at once."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"choices": [{"message": {"content": "ok"}}]})

    app = web.Application(client_max_size=32 << 20)
    app.router.add_post("/v1/chat/completions", answer)
    async with serve_app(app) as url:
        yield url


def rss_mb(pid: int) -> float:
    """A process's resident memory in MB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def quick_sim() -> AbstractContextManager[str]:
    """The built-in simulator answering in a few milliseconds (4 output tokens on
    average): traffic enough for the recorder's tests, none of it waiting."""
    from tailreplay.sim.launcher import sim_process

    quick = ["--decode-base-ms", "2", "--prefill-base-ms", "1", "--prefill-per-token-ms", "0"]
    return sim_process([*quick, "--output-mean", "4"])
