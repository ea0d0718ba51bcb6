"""A dialect checked from outside: an Anthropic Messages server written from Anthropic's
public documentation alone, by someone who had not read this code
(``tests/outside/anthropic_messages_server.py``; its docstring names the pages), driven
by the official anthropic SDK through the proxy, then replayed and reported.

The server counts tokens by its own rule and sends its documented event sequence
(``ping`` after the first block's start, ``signature_delta`` before a thinking block
ends): the record must hold what the SDK saw, and a replay must be requests that
server accepts.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import REPO, UNBOUND
from tests.proxy_helpers import start_proxy_process

SERVER = REPO / "tests" / "outside" / "anthropic_messages_server.py"


@contextmanager
def outside_server() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", "0", "--first-token-ms", "20", "--token-ms", "3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert m is not None, line
        yield m.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _calls(client: anthropic.Anthropic) -> Iterator[tuple[bool, Any, int]]:
    """(streamed, final message, token events the SDK saw) for a dozen calls."""
    for i in range(12):
        kw: dict[str, Any] = {
            "model": "claude-outside",
            "max_tokens": 40 + i,
            "system": "Answer briefly.",
            "messages": [{"role": "user", "content": f"Question {i}: " + "why? " * (i + 1)}],
        }
        if i % 3 == 2:
            kw["thinking"] = {"type": "enabled", "budget_tokens": 5}
        if i % 2 == 0:
            yield False, client.messages.create(**kw), 0
            continue
        events = 0
        with client.messages.stream(**kw) as stream:
            for event in stream:
                tokens = event.type == "content_block_delta"
                events += tokens and event.delta.type != "signature_delta"
            yield True, stream.get_final_message(), events


@pytest.mark.parametrize("bodies", ["none", "full"])
def test_an_outside_messages_server_is_captured_replayed_and_reported(
    tmp_path: Path, bodies: str
) -> None:
    capture = tmp_path / "capture"
    seen = []
    with outside_server() as production:
        proc, url, _ = start_proxy_process(production, capture, "--bodies", bodies)
        try:
            client = anthropic.Anthropic(base_url=url, api_key="sk-ant-x", max_retries=0)
            for streamed, message, events in _calls(client):
                seen.append((streamed, message, events))
                time.sleep(0.02)
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    records = sorted(ArchiveReader(sorted(capture.iterdir())), key=lambda r: r.start_ns)
    assert len(records) == len(seen) == 12
    for record, (streamed, message, events) in zip(records, seen, strict=True):
        assert (record.status, record.error) == (200, None)
        assert (record.model, record.stream) == ("claude-outside", streamed)
        assert record.input_tokens == message.usage.input_tokens
        assert record.output_tokens == message.usage.output_tokens
        if streamed:
            assert events == message.usage.output_tokens
            assert len(record.chunk_gaps_us or []) == events - 1
            assert record.ttfb_ns is not None and record.ttfb_ns >= 20e6  # --first-token-ms
        assert record.finish_reason in ("stop", "length")

    result, report = tmp_path / "r.msgpack", tmp_path / "report.json"
    with outside_server() as staging:
        replayed = CliRunner().invoke(
            cli,
            [
                "replay",
                "--speed",
                "1x",
                "--target",
                staging,
                "--out",
                str(result),
                *UNBOUND,
                str(capture),
            ],
        )
    assert replayed.exit_code == 0, replayed.output
    results = list(ArchiveReader([result]))
    assert len(results) == 12
    # A request the server refused (no anthropic-version, an empty body) would be a 400.
    assert [(r.status, r.error) for r in results] == [(200, None)] * 12
    if bodies == "full":  # the same bodies: the same counts, by the server's own rule
        by_span = {r.span_id: r for r in records}
        for r in results:
            assert r.input_tokens == by_span[r.orig_span_id].input_tokens  # type: ignore[index]
    reported = CliRunner().invoke(cli, ["report", str(result), "--json", str(report)])
    assert reported.exit_code == 0, reported.output
    overall = json.loads(report.read_text())["overall"]
    assert overall["replayed"]["requests"] == overall["recorded"]["requests"] == 12
