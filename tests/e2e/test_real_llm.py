"""End to end against a real LLM server: llama.cpp's OpenAI-compatible server with a
tiny gemma model. Run by `make e2e-real` (it installs both); skipped elsewhere.

llama.cpp ignores stream_options.include_usage, so streamed records must carry
estimated tokens; non-streamed ones the server's usage.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner
from yarl import URL

from tailreplay.cli import cli
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.server import start
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import free_port, served

MODEL = os.environ.get("TAILREPLAY_E2E_MODEL")
pytestmark = pytest.mark.skipif(not MODEL, reason="set by `make e2e-real`")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    # By default a new request interrupts the one being generated (its stream is cut);
    # an open-loop replay overlaps requests, so let them queue instead.
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(MODEL), "--chat_format",
           "gemma", "--n_threads", "2", "--host", "127.0.0.1", "--port", str(port),
           "--interrupt_requests", "False"]  # fmt: skip
    with served(cmd, f"http://127.0.0.1:{port}", "/v1/models", log) as url:
        yield url


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
                    seen.append({"stream": True, "content": len(chunks), "n": i % 7 + 3})
                else:
                    r = await client.chat.completions.create(
                        model="gemma", messages=messages, max_tokens=16
                    )
                    assert r.usage is not None
                    seen.append(
                        {
                            "stream": False,
                            "usage": (r.usage.prompt_tokens, r.usage.completion_tokens),
                            "n": i % 7 + 3,
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
    true_prompt = {s["n"]: s["usage"][0] for s in seen if not s["stream"]}
    for i, (r, s) in enumerate(zip(records, seen, strict=True)):
        assert r.status == 200 and r.error is None and r.ttfb_ns < r.duration_ns
        if s["stream"]:
            assert r.tokens_source == "estimate" and r.output_tokens == s["content"]
            # Once the recorder has seen the server's counts for this model (non-streamed
            # requests report usage), its estimates match them: the template and the
            # tokenizer's difference are calibrated away.
            if i >= 20:
                assert abs(r.input_tokens - true_prompt[s["n"]]) <= 1, (r, true_prompt)
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


def test_queued_streams_time_the_first_token_not_the_keep_alive(tmp_path: Path, llama: str) -> None:
    """Requests queued behind each other (one slot) wait long enough for the server's
    `: ping` keep-alive comments (every 15 s): the record's TTFT is the first content
    the client saw, no gap comes from a comment, and a replay has TPOT from estimates."""
    out = tmp_path / "capture"
    first_content: dict[int, float] = {}

    async def one(client: openai.AsyncOpenAI, i: int) -> None:
        stream = await client.chat.completions.create(
            model="gemma", messages=[{"role": "user", "content": f"Say {i} in words."}],
            max_tokens=24, stream=True, extra_headers={"x-request-index": str(i)},
        )  # fmt: skip
        async for c in stream:
            if c.choices and c.choices[0].delta.content and i not in first_content:
                first_content[i] = time.time_ns()  # wall clock, as records' start_ns

    async def capture() -> None:
        config = ProxyConfig(upstream=URL(llama), listen_port=0, admin_port=None, out_dir=out)
        async with start(config) as proxy:
            client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk", max_retries=0,
                                        timeout=300)  # fmt: skip
            await asyncio.gather(*(one(client, i) for i in range(48)))
            await client.close()

    asyncio.run(capture())
    records = list(ArchiveReader(sorted(out.glob("*.msgpack"))))
    assert len(records) == 48 and all(r.status == 200 and r.error is None for r in records)
    by_request = {int(dict(r.req_headers or [])["x-request-index"]): r for r in records}
    waited = [r for r in records if r.ttfb_ns > 16 * 10**9]
    assert waited, f"no request queued past a keep-alive: {sorted(r.ttfb_ns for r in records)}"
    for i, client_first in first_content.items():
        r = by_request[i]
        # The record's first token is the first content the client saw (the proxy sits
        # between, a few ms ahead): not the keep-alive comment that came seconds before.
        assert abs(r.start_ns + r.ttfb_ns - client_first) < 50_000_000, (i, r, client_first)
        assert r.tokens_source == "estimate" and r.output_tokens and r.output_tokens >= 1
        assert all(g < 5_000_000 for g in r.chunk_gaps_us or []), r.chunk_gaps_us  # no ping gap

    archive = tmp_path / "capture.msgpack"
    merged = CliRunner().invoke(
        cli, ["traces", "merge", *map(str, out.glob("*.msgpack")), "-o", str(archive)]
    )
    assert merged.exit_code == 0, merged.stderr
    summary = tmp_path / "s.json"
    result = CliRunner().invoke(
        cli, ["replay", "--speed", "1x", "--target", llama, "--allow-upstream", "--timeout",
              "600s", "--json", str(summary), "--out", str(tmp_path / "r.msgpack"), str(archive)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    s = json.loads(summary.read_text())
    assert s["completed"] == 48 and s["tpot_ms"] is not None, s
    results = list(ArchiveReader([tmp_path / "r.msgpack"]))
    assert all(r.tokens_source == "estimate" and r.output_tokens for r in results)
