"""A client that leaves mid-stream: captured with where it left, and replayed leaving
there too (``replay --client-aborts replay``, the default).

The simulator decodes a token every 20 ms, so a client that closes after reading its
20th token event is gone before the 21st is written: the proxy records 20 tokens
delivered. Replayed through a second capturing proxy, the replayer closes the stream
after 20 token events as well, and that proxy records the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path

import aiohttp

from tailreplay.sim.profiles import PROFILES
from tailreplay.sim.server import SimConfig, serve
from tailreplay.traces.archive.record import Record
from tests.helpers import chat_archive, metric
from tests.proxy_helpers import proxy_to, records

SLOW = PROFILES["default"].with_overrides(decode_base_ms=20.0, decode_per_seq_ms=0.0)
BODY = {"model": "m", "messages": [{"role": "user", "content": "tell me a long story"}],
        "stream": True, "max_tokens": 200, "ignore_eos": True}  # fmt: skip


async def _read_then_leave(url: str, events: int) -> None:
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=BODY) as r:
        seen = 0
        async for line in r.content:
            if line.startswith(b"data: {") and b'"content"' in line:
                seen += 1
                if seen == events:
                    return  # leaving the block closes the connection mid-stream


async def _replay(archive: Path, target: str, out: Path, *extra: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tailreplay", "replay", str(archive), "--target", target,
        "--out", str(out), "--no-preflight", *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()
    return stdout.decode()


async def _aborts(sim: str, before: float) -> float:
    for _ in range(100):  # the simulator notices the hang-up on its next write
        if (now := await metric(sim, "tailreplay_sim_client_aborts_total")) > before:
            return now
        await asyncio.sleep(0.05)
    return before


async def test_an_abort_is_captured_where_it_happened_and_replayed_there(tmp_path: Path) -> None:
    async with serve(SimConfig(profile=SLOW, port=0)) as sim:
        async with proxy_to(sim, tmp_path / "capture") as proxy:
            await _read_then_leave(proxy.url, 20)
            assert await _aborts(sim, 0) == 1
        (captured,) = records(tmp_path / "capture")
        assert captured.error == "client_abort" and captured.status == 200
        assert captured.output_tokens is not None and abs(captured.output_tokens - 20) <= 1
        archive = sorted((tmp_path / "capture").glob("*.msgpack*"))[0]

        async with proxy_to(sim, tmp_path / "again") as proxy:
            stdout = await _replay(archive, proxy.url, tmp_path / "r.msgpack")
            assert await _aborts(sim, 1) == 2  # the target saw the client leave
        (again,) = records(tmp_path / "again")
        assert again.error == "client_abort"
        assert again.output_tokens is not None and abs(again.output_tokens - 20) <= 1
        assert "client_abort 1" in stdout

        # --client-aborts off reads the answer whole: no abort, more tokens.
        async with proxy_to(sim, tmp_path / "whole") as proxy:
            await _replay(archive, proxy.url, tmp_path / "w.msgpack", "--client-aborts", "off")
        (whole,) = records(tmp_path / "whole")
        assert whole.error is None and whole.status == 200


def test_a_client_that_left_before_the_first_token_leaves_after_as_long() -> None:
    from tailreplay.replayer.prompts import PromptMaker
    from tailreplay.replayer.request import RequestBuilder
    from tailreplay.replayer.schedule import Planned

    builder = RequestBuilder(model_map={}, force_lengths=True, prompts=PromptMaker())
    record = Record(start_ns=1, stream=True, input_tokens=50, output_tokens=0,
                    duration_ns=100_000_000, error="client_abort", status=200)  # fmt: skip
    spec = builder.build(Planned(0.0, record, 0, False, 0))
    assert spec.abort_after_tokens is None and spec.abort_after_s == 0.1
    assert spec.body is not None and b'"max_tokens": 16' in spec.body  # never 0
    # The preflight's probe reads its one token whole, whatever the record's client did.
    probe = builder.build(Planned(0.0, record, 0, False, 1), probe=True)
    assert probe.abort_after_s is None and probe.abort_after_tokens is None


def test_the_result_records_the_budget_the_request_was_sent_with() -> None:
    # The plan's budget was 0 (the client left before its first token); the request
    # asked for 16, and the target was asked for 16: the result says 16.
    from tailreplay.replayer.prompts import PromptMaker
    from tailreplay.replayer.request import BodyEdits, RequestBuilder
    from tailreplay.replayer.results import result_record
    from tailreplay.replayer.schedule import Planned
    from tailreplay.replayer.transport import Outcome

    builder = RequestBuilder(model_map={}, force_lengths=True, prompts=PromptMaker())
    record = Record(
        start_ns=1,
        stream=True,
        input_tokens=50,
        output_tokens=0,
        duration_ns=100_000_000,
        error="client_abort",
        status=200,
    )
    item = Planned(0.0, record, 0, False, 0)
    spec = builder.build(item)
    result = result_record(item, 1, shard=None, spec=spec, outcome=Outcome(status=200))
    assert spec.budget == result.max_tokens == 16
    # A --body-set of the budget is what went out, too.
    edits = BodyEdits(assign={"max_tokens": 99})
    edited = RequestBuilder(model_map={}, force_lengths=False, prompts=PromptMaker(), edits=edits)
    plain = Record(start_ns=1, stream=False, input_tokens=50, output_tokens=10)
    spec = edited.build(Planned(0.0, plain, 0, False, 10))
    assert spec.budget == 99
    dry = result_record(Planned(0.0, plain, 0, False, 10), 1, shard=None)
    assert dry.max_tokens == 10  # a dry run's: the plan's


async def _held_answers(head: bytes) -> tuple[asyncio.Server, str]:
    """A target that reads each request, writes ``head`` (maybe nothing), and holds."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in request.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(head)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_aborts_the_target_never_began_to_answer_are_not_answers(tmp_path: Path) -> None:
    """Recorded clients that left after 0.2 s, non-streamed: against a target that never
    answers, the run measured nothing (exit 5); against one whose answer had begun, it
    did (exit 0)."""
    archive = tmp_path / "aborts.msgpack"
    aborted = {"stream": False, "error": "client_abort", "duration_ns": 200_000_000}
    chat_archive(archive, 6, gap_ms=50, seed=3, **aborted)
    begun = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n{"
    codes = {}
    for name, head in (("silent", b""), ("begun", begun)):
        server, url = await _held_answers(head)
        async with server:
            args = [str(archive), "--target", url, "--no-preflight", "--timeout", "5s"]
            proc = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "tailreplay", "replay", *args),
                *("--json", str(tmp_path / f"{name}.json")),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            _, stderr = await asyncio.wait_for(proc.communicate(), 120)
            codes[name] = proc.returncode
        assert b"Traceback" not in stderr, stderr.decode()
    assert codes == {"silent": 5, "begun": 0}
    summary = json.loads((tmp_path / "begun.json").read_text())
    assert summary["errors"] == {"client_abort": 6} and summary["aborts_answered"] == 6
