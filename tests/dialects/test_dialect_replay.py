"""Every dialect from capture to replay to report, with and without bodies.

The official SDKs drive chat, completions, Responses, embeddings and Anthropic
Messages through ``tailreplay proxy`` (``--bodies none`` and ``--bodies full``) in
front of the built-in simulator; the capture is replayed at 1x against an identical
simulator. No request goes out empty: each comes back 200 from a simulator that
refuses an empty or wrong-dialect body with 400. The target counts as many prompt
tokens as were recorded, and honours the output budget (stretched 1.8x in the tail).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.dialects import dialect_for
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tests.helpers import UNBOUND
from tests.proxy_helpers import start_proxy_process

ROUNDS = 4
SIM = ["--profile", "fast"]


def _drive(oa: openai.OpenAI, an: anthropic.Anthropic, i: int) -> None:
    """One round of every dialect, streamed and not, prompts growing with ``i``."""
    text = "How do queues form under load? " * (1 + 3 * i)
    h = {"traceparent": f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"}
    ask = [{"role": "user", "content": text}]
    oa.chat.completions.create(model="gpt-x", messages=ask, max_tokens=12 + i, extra_headers=h)
    for _ in oa.chat.completions.create(
        model="gpt-x", messages=ask, max_tokens=20, stream=True, extra_headers=h
    ):
        pass
    oa.completions.create(model="gpt-x", prompt=text, max_tokens=10 + i, extra_headers=h)
    oa.responses.create(model="gpt-r", input=text, max_output_tokens=15, extra_headers=h)
    for _ in oa.responses.create(
        model="gpt-r", input=ask, max_output_tokens=18 + i, stream=True, extra_headers=h
    ):
        pass
    oa.embeddings.create(model="emb", input=text, extra_headers=h)
    an.messages.create(model="claude-x", max_tokens=14 + i, messages=ask, extra_headers=h)
    with an.messages.stream(
        model="claude-x", max_tokens=22, system="Be brief.", messages=ask, extra_headers=h
    ) as s:
        s.until_done()


@pytest.fixture(scope="module", params=["none", "full"])
def capture(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp(f"bodies-{request.param}")
    with sim_process(SIM) as production:
        proc, url, _ = start_proxy_process(production, out, "--bodies", request.param)
        try:
            oa = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
            an = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
            for i in range(ROUNDS):
                _drive(oa, an, i)
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    return out


def _replay(capture: Path, tmp: Path) -> tuple[list[Record], dict[bytes, Record], Any]:
    recorded = {r.span_id: r for r in ArchiveReader(sorted(capture.iterdir()))}
    out, report = tmp / "r.msgpack", tmp / "report.json"
    with sim_process(SIM) as staging:
        result = CliRunner().invoke(
            cli,
            [
                "replay",
                "--speed",
                "1x",
                "--target",
                staging,
                "--out",
                str(out),
                *UNBOUND,
                str(capture),
            ],
        )
    assert result.exit_code == 0, result.output
    assert "never sent" not in result.output and "empty" not in result.output
    reported = CliRunner().invoke(cli, ["report", str(out), "--json", str(report)])
    assert reported.exit_code == 0, reported.output
    return list(ArchiveReader([out])), recorded, json.loads(report.read_text())


def test_every_dialect_replays_as_valid_requests_of_the_recorded_lengths(
    capture: Path, tmp_path: Path
) -> None:
    results, recorded, _ = _replay(capture, tmp_path)
    dialects = Counter(dialect_for(r.path).name for r in results)  # type: ignore[union-attr]
    assert dialects == {
        "chat": 2 * ROUNDS,
        "completions": ROUNDS,
        "responses": 2 * ROUNDS,
        "embeddings": ROUNDS,
        "messages": 2 * ROUNDS,
    }
    for result in results:
        original = recorded[result.orig_span_id]  # type: ignore[index]
        what = f"{result.path} stream={original.stream}"
        assert (result.status, result.error) == (200, None), what
        assert result.stream == original.stream, what
        assert result.input_tokens == original.input_tokens, what
        assert original.output_tokens is not None
        want = math.ceil(1.8 * original.output_tokens) if result.tail else original.output_tokens
        assert result.output_tokens == want, what


def test_the_report_has_a_row_per_route_and_deltas_name_path_and_model(
    capture: Path, tmp_path: Path
) -> None:
    results, _, report = _replay(capture, tmp_path)
    routes = {row["route"]: row for row in report["routes"]}
    assert set(routes) == {r.path for r in results}
    assert routes["/v1/messages"]["replayed"]["requests"] == 2 * ROUNDS
    deltas = tmp_path / "deltas.csv"
    out = tmp_path / "r.msgpack"
    done = CliRunner().invoke(cli, ["report", str(out), "--deltas", str(deltas)])
    assert done.exit_code == 0, done.output
    header, *rows = deltas.read_text().splitlines()
    assert "path" in header.split(",") and "model" in header.split(",")
    assert any(",/v1/embeddings," in row and ",emb," in row for row in rows)
