"""End to end against llama.cpp's own server (`llama-server`): several parallel slots,
continuous batching, Prometheus `/metrics`. Run by `make e2e-llama` (it builds the
server and installs the tiny gemma model); skipped elsewhere.

A handful of streamed chat requests is captured through the proxy, then replayed
against the same server with `--scrape target@1s`: every answer is a 200 with its
first-token time and inter-token gaps, and the server's own series (requests
processing and deferred, token counters) are in the scrape beside the results.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import msgpack
import openai
import pytest
from click.testing import CliRunner
from yarl import URL

from tailreplay.cli import cli
from tailreplay.engine_metrics import scrape_path
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.server import start
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import free_port, served

MODEL = os.environ.get("TAILREPLAY_E2E_MODEL")
SERVER = os.environ.get("TAILREPLAY_LLAMA_SERVER")
pytestmark = pytest.mark.skipif(not (MODEL and SERVER), reason="set by `make e2e-llama`")

SLOTS = 4
REQUESTS = 12


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    cmd = [str(SERVER), "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(port),
           "--parallel", str(SLOTS), "--ctx-size", "4096", "--metrics", "-t", "2"]  # fmt: skip
    with served(cmd, f"http://127.0.0.1:{port}", "/health", log) as url:
        yield url


def _capture(llama: str, out: Path) -> None:
    """Two waves of streamed requests, more at once than the server has slots."""

    async def one(client: openai.AsyncOpenAI, i: int) -> None:
        stream = await client.chat.completions.create(
            model="gemma", messages=[{"role": "user", "content": f"Count to {i % 5 + 8}."}],
            max_tokens=32, stream=True, stream_options={"include_usage": True},
        )  # fmt: skip
        async for _ in stream:
            pass

    async def capture() -> None:
        config = ProxyConfig(upstream=URL(llama), listen_port=0, admin_port=None, out_dir=out)
        async with start(config) as proxy:
            client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk", max_retries=0)
            first = asyncio.gather(*(one(client, i) for i in range(REQUESTS * 2 // 3)))
            await asyncio.sleep(1.0)
            await asyncio.gather(
                first, *(one(client, i) for i in range(REQUESTS * 2 // 3, REQUESTS))
            )
            await client.close()

    asyncio.run(capture())


def test_a_replay_against_llama_server_times_tokens_and_scrapes_its_metrics(
    tmp_path: Path, llama: str
) -> None:
    out = tmp_path / "capture"
    _capture(llama, out)
    archive = tmp_path / "window.msgpack"
    merged = CliRunner().invoke(
        cli, ["traces", "merge", *map(str, out.glob("*.msgpack")), "-o", str(archive)]
    )
    assert merged.exit_code == 0, merged.output
    assert len(list(ArchiveReader([archive]))) == REQUESTS

    results, summary = tmp_path / "r.msgpack", tmp_path / "s.json"
    result = CliRunner().invoke(
        cli, ["replay", "--speed", "1x", "--target", llama, "--allow-upstream",
              "--scrape", "target@1s", "--json", str(summary), "--out", str(results),
              str(archive)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    s = json.loads(summary.read_text())
    assert s["requests"] == REQUESTS and s["completed"] == REQUESTS and not s["errors"], s

    records = list(ArchiveReader([results]))
    assert len(records) == REQUESTS
    for r in records:
        assert r.status == 200 and r.error is None, r
        assert 0 < r.ttfb_ns < r.duration_ns, r
        assert r.chunk_gaps_us and len(r.chunk_gaps_us) >= 2, r
        # llama-server honours stream_options.include_usage: the counts are its own.
        assert r.tokens_source == "usage" and r.output_tokens, r

    header, *pages = msgpack.Unpacker(scrape_path(results).open("rb"), raw=False)
    assert header["format"] == "tailreplay-scrape" and header["failures"] == {}, header
    assert pages, "no metrics page was read"
    for p in pages:
        assert {"running", "waiting"} <= set(p["series"]), p
        assert "llamacpp:tokens_predicted_total" in p["series"], p
    # The counters moved over the run and the slots were seen busy.
    assert pages[-1]["series"]["llamacpp:tokens_predicted_total"] > 0
    assert max(p["series"]["running"] for p in pages) >= 1
    assert max(p["series"]["running"] for p in pages) <= SLOTS
