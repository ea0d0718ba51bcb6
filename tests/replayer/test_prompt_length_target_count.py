"""Synthetic prompts count the recorded input tokens as the target counts them, on a
target with a tokenizer and a chat template of its own.

The target here is a plain HTTP server in a thread (no tailreplay code): it counts a
chat prompt as 1.2 tokens for each of ours (a tokenizer 20% finer than the project's)
plus 22 for its template (what llama.cpp's server adds with gemma 3). The replay
learns both from the answers' usage (``replayer/target_count.py``); its first
requests, built ahead before any answer came, are sized again when they fall due.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tailreplay.replayer.prompts import CHAT_OVERHEAD_TOKENS
from tailreplay.replayer.target_count import TargetCount
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import chat_archive

RATIO, TEMPLATE = 1.2, 22


class _Counting(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real engine's server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ours = len(body["messages"][-1]["content"].split()) + CHAT_OVERHEAD_TOKENS
        usage = {"prompt_tokens": round(RATIO * ours) + TEMPLATE, "completion_tokens": 2}
        usage["total_tokens"] = usage["prompt_tokens"] + 2
        answer = json.dumps(
            {
                "id": "c",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _counting_target() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_prompts_count_the_recorded_tokens_on_a_target_with_a_template(tmp_path: Path) -> None:
    archive, results = tmp_path / "w.msgpack", tmp_path / "r.msgpack"
    # 60 requests 50 ms apart: all of them built ahead before the first answer came.
    recorded = [m["input_tokens"] for m in chat_archive(archive, 60, gap_ms=50, seed=3,
                                                        stream=False)]  # fmt: skip
    with _counting_target() as url:
        done = subprocess.run(
            [sys.executable, "-m", "tailreplay", "replay", str(archive), "--target", url,
             "--out", str(results), "--tail-stretch", "1", "--no-preflight"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-600:]
    answered = sorted(ArchiveReader([results]), key=lambda r: r.intended_ns)
    counted = [r.input_tokens for r in answered]
    assert len(counted) == 60 and None not in counted
    # Sent before any answer came, the first two count 22 and a fifth more.
    assert all(got > want + TEMPLATE for want, got in zip(recorded[:2], counted[:2], strict=True))
    # Ten answers teach the model (a second after the start, with room for a slow
    # machine); every request due after counts what was recorded, as the target counts
    # it, within a token: but for prompts shorter than the target's template and a
    # word, which no prompt can count.
    later = zip(recorded[20:], counted[20:], strict=True)
    off = [(want, got) for want, got in later if want >= TEMPLATE + 8 and abs(got - want) > 1]
    assert not off, off


def test_the_count_model_is_a_shift_until_sizes_differ_and_refuses_a_mock() -> None:
    c = TargetCount()
    for _ in range(20):
        c.observe(1000, 1100)
    assert c.line is None and c.ours_for(1100) == 1000  # one size: a shift alone
    for ours in (100, 300, 900, 2000, 50):
        c.observe(ours, round(1.1 * ours) + 30)
    assert c.line is not None  # sizes now vary: the template shows
    # A mock that reports one count whatever it gets: no line (its slope would be 0),
    # and the ratio stays within what tokenizers differ by.
    m = TargetCount()
    for ours in (20, 50, 400, 900, 3000, 8000) * 2:
        m.observe(ours, 14)
    assert m.line is None and m.ours_for(16) <= 32
    # Its counts never move while the prompts did: they say nothing of a tokenizer, so
    # prompts are made the size asked (not grown, request after request, to the bound).
    assert m.deaf and m.ours_for(16) == 16 and m.ours_for(5000) == 5000
    assert not c.deaf


def test_a_template_seen_on_short_prompts_does_not_cut_a_long_one() -> None:
    """llama.cpp's server with gemma 3 counted a replay's first prompts of 31, 32 and 59
    tokens as 53, 54 and 80 (its chat template adds 22). Read as a ratio (1.6x), that
    would have made the next prompt, recorded at 428, count 290 on the server."""
    c = TargetCount()
    for ours, reported in ((31, 53), (32, 54), (59, 80)):
        c.observe(ours, reported)
    assert c.line is None  # three answers: too few for a line
    assert abs(c.ours_for(428) + 22 - 428) <= 2, c.ours_for(428)
    # On a target whose tokenizer alone differs (1.2x, no template), the shift is off
    # by no more than that difference.
    r = TargetCount()
    for ours in (40, 60, 90):
        r.observe(ours, round(1.2 * ours))
    assert 428 / 1.2 <= r.ours_for(428) <= 428, r.ours_for(428)
