"""End to end against a real LLM server: llama.cpp's OpenAI-compatible server with a
tiny gemma model. Run by `make e2e-real` (it installs both); skipped elsewhere.

llama.cpp ignores stream_options.include_usage, so streamed records must carry
estimated tokens; non-streamed ones the server's usage.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner
from yarl import URL

from tailreplay.cli import cli
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.server import start
from tailreplay.traces.reader import ArchiveReader
from tests.helpers import free_port

MODEL = os.environ.get("TAILREPLAY_E2E_MODEL")
pytestmark = pytest.mark.skipif(not MODEL, reason="set by `make e2e-real`")


@pytest.fixture(scope="module")
def llama() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        # By default a new request interrupts the one being generated (its stream is cut);
        # an open-loop replay overlaps requests, so let them queue instead.
        [sys.executable, "-m", "llama_cpp.server", "--model", str(MODEL), "--chat_format", "gemma",
         "--n_threads", "2", "--host", "127.0.0.1", "--port", str(port),
         "--interrupt_requests", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, "llama.cpp server exited"
                assert time.monotonic() < deadline, "llama.cpp server did not start"
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def test_capture_then_replay_a_real_server(tmp_path: Path, llama: str) -> None:
    out = tmp_path / "capture"
    seen: list[dict] = []

    async def capture() -> None:
        config = ProxyConfig(upstream=URL(llama), listen_port=0, admin_port=None, out_dir=out)
        async with start(config) as proxy:
            client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-e2e", max_retries=0)
            for i in range(50):  # one at a time: the server has one slot
                messages = [{"role": "user", "content": f"Count to {i % 7 + 3}."}]
                if i % 2:
                    stream = await client.chat.completions.create(
                        model="gemma", messages=messages, max_tokens=16, stream=True
                    )
                    chunks = [c async for c in stream if c.choices and c.choices[0].delta.content]
                    seen.append({"stream": True, "content": len(chunks)})
                else:
                    r = await client.chat.completions.create(
                        model="gemma", messages=messages, max_tokens=16
                    )
                    assert r.usage is not None
                    seen.append(
                        {
                            "stream": False,
                            "usage": (r.usage.prompt_tokens, r.usage.completion_tokens),
                        }
                    )
            await client.close()

    asyncio.run(capture())
    archive = tmp_path / "capture.msgpack"
    assert (
        CliRunner()
        .invoke(cli, ["traces", "merge", *map(str, out.glob("*.msgpack")), "-o", str(archive)])
        .exit_code
        == 0
    )
    records = sorted(ArchiveReader([archive]), key=lambda r: r.start_ns)
    assert len(records) == 50
    for r, s in zip(records, seen, strict=True):
        assert r.status == 200 and r.error is None and r.ttfb_ns < r.duration_ns
        if s["stream"]:
            assert r.tokens_source == "estimate" and r.output_tokens == s["content"]
            assert r.input_tokens and r.input_tokens > 0
        else:
            assert r.tokens_source == "usage" and (r.input_tokens, r.output_tokens) == s["usage"]

    summary = tmp_path / "s.json"
    result = CliRunner().invoke(
        cli,
        [
            "replay",
            "--speed",
            "2x",
            "--target",
            llama,
            "--allow-upstream",
            "--json",
            str(summary),
            str(archive),
        ],
    )
    assert result.exit_code == 0, result.output
    s = json.loads(summary.read_text())
    assert s["requests"] == 50, s
    assert s["completed"] == 50 and not s["errors"], s
