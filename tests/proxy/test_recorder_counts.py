"""The recorder process's published counts: tokens by route, as /metrics shows them."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

from yarl import URL

from tailreplay.dialects import ROUTES
from tailreplay.openai_api import ResponseTap
from tailreplay.proxy import recorder_process
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.exchange import Exchange
from tailreplay.proxy.record_builder import RecordBuilder
from tailreplay.proxy.recorder_process import Stat

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'
ANSWER = (
    b'{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":%d,"completion_tokens":%d}}'
)


def _exchange(path: str, prompt: int, completion: int) -> Exchange:
    ex = Exchange(
        trace_id=b"t" * 16,
        span_id=b"s" * 8,
        parent_span_id=None,
        start_ns=time.time_ns(),
        t0_ns=time.monotonic_ns(),
        method="POST",
        path=path,
        route=path,
        headers=[("Content-Type", "application/json")],
        req_body=BODY,
        status=200,
    )
    ex.tap = ResponseTap(stream=False)
    ex.tap.feed(ANSWER % (prompt, completion))
    ex.finish(time.monotonic_ns())
    return ex


class _Pipe:
    def __init__(self, batches: list[list[Exchange]]) -> None:
        self.data = [pickle.dumps(batch) for batch in batches]

    def recv_bytes(self) -> bytes:
        if not self.data:
            raise EOFError
        return self.data.pop(0)


def test_tokens_are_published_by_route(tmp_path: Path) -> None:
    config = ProxyConfig(upstream=URL("http://127.0.0.1:1"), out_dir=tmp_path)
    stats = [0] * Stat.SIZE
    writer = recorder_process._open_writer(config, stats)
    builder = RecordBuilder(config, writer)
    tokens = recorder_process._TokenCounter()
    builder.on_record = tokens
    chat, other = "/v1/chat/completions", "/v1/completions"
    batches = [[_exchange(chat, 10, 2)] * 100, [_exchange(other, 5, 1), _exchange(chat, 1, 1)]]
    recorder_process._record_batches(_Pipe(batches), builder, stats, tokens)
    writer.close()
    counts = stats[Stat.TOKENS :]
    by_route = {route: (counts[2 * i], counts[2 * i + 1]) for i, route in enumerate(ROUTES)}
    assert by_route[chat] == (1001, 201)
    assert by_route[other] == (5, 1)
    assert stats[Stat.WRITTEN] == 102 and stats[Stat.HANDLED] == 102
