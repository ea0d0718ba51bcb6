"""Synthetic prompts for records kept without bodies: exact length, recorded sharing.

What a target sees is the request body, so everything is checked on built bodies:
their rendered prompt counts the recorded input tokens (cl100k_base), records that
shared prefix blocks in production share that text, others share none, and the
same record always gets the same prompt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tailreplay.dialects.prompt_text import chat_text
from tailreplay.replayer import prompts
from tailreplay.replayer.prompts import BLOCK_TOKENS, PromptMaker
from tailreplay.replayer.request import BodyEdits, RequestBuilder
from tailreplay.replayer.schedule import Planned, ScheduleConfig, plan, schedule
from tailreplay.traces.archive.record import Record
from tailreplay.traces.text.tokens import count_tokens, get
from tests.helpers import REPO, write_plain

T0 = 1_700_000_000 * 10**9


def _body(
    tokens: int,
    hashes: list[int] | None = None,
    *,
    trace: int = 1,
    path: str = "/v1/chat/completions",
    maker: PromptMaker | None = None,
) -> dict[str, Any]:
    record = Record(start_ns=1, trace_id=trace.to_bytes(16, "big"), method="POST", path=path,
                    input_tokens=tokens, prefix_hashes=hashes)  # fmt: skip
    builder = RequestBuilder(model_map={}, force_lengths=True, prompts=maker or PromptMaker(0))
    spec = builder.build(Planned(0.0, record, 0, False, 8))
    assert spec.body is not None
    body: dict[str, Any] = json.loads(spec.body)
    return body


def _words(body: dict[str, Any]) -> list[str]:
    text = body["messages"][0]["content"] if "messages" in body else body["prompt"]
    assert isinstance(text, str) and text.startswith(" ")
    return text.split(" ")[1:]


@pytest.mark.parametrize("tokens", [8, 100, 511, 512, 513, 1500, 20_000])
@pytest.mark.parametrize("hashes", [None, [11, 12], list(range(100))])
def test_the_rendered_prompt_counts_the_recorded_input_tokens(
    tokens: int, hashes: list[int] | None
) -> None:
    body = _body(tokens, hashes)
    assert count_tokens(chat_text(body["messages"])) == tokens


def test_a_completions_prompt_counts_the_recorded_input_tokens() -> None:
    # A bare prompt has no chat wrapping, so its text carries every recorded token.
    body = _body(777, [5], path="/v1/completions")
    assert count_tokens(body["prompt"]) == 777


def test_records_that_shared_prefix_blocks_share_that_text_and_no_more() -> None:
    a = _words(_body(3000, [1, 2, 3, 4], trace=1))
    b = _words(_body(3000, [1, 2, 9, 10], trace=2))
    shared = 2 * BLOCK_TOKENS
    assert a[:shared] == b[:shared]
    assert a[shared : shared + BLOCK_TOKENS] != b[shared : shared + BLOCK_TOKENS]
    # Without recorded hashes, two records share nothing (their own ids draw the text).
    c, d = _words(_body(3000, None, trace=3)), _words(_body(3000, None, trace=4))
    assert c[:BLOCK_TOKENS] != d[:BLOCK_TOKENS]


def test_the_same_record_gets_the_same_prompt_and_the_seed_changes_it() -> None:
    first = _body(5000, [1, 2], trace=7)
    assert _body(5000, [1, 2], trace=7, maker=PromptMaker(0)) == first
    assert _words(_body(5000, [1, 2], trace=7, maker=PromptMaker(3))) != _words(first)


def test_the_words_vary() -> None:
    words = _words(_body(20_000))
    assert len(set(words)) > 100  # not one word repeated: a prompt, not a pattern


def test_shared_blocks_kept_for_reuse_stay_within_their_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prompts, "BLOCK_CACHE_BYTES", 100_000)
    maker = PromptMaker(0)
    for i in range(200):  # 200 records with distinct 4-block prefixes: ~2.6 MB of blocks
        maker.prompt(4 * BLOCK_TOKENS, [4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3], b"x")
    assert 0 < maker.cached_bytes <= 100_000
    # A block that left the cache is drawn again, identically.
    again = PromptMaker(0).prompt(BLOCK_TOKENS, [0], b"y")
    assert maker.prompt(BLOCK_TOKENS, [0], b"z") == again


def test_records_of_one_tick_and_their_copies_share_no_text(tmp_path: Path) -> None:
    # A coarse clock stamps many requests alike and imported traces have no trace ids:
    # were prompts drawn from the start alone, a tick's requests would be one text and
    # a prefix cache would serve them for free, a sharing production never had.
    maps = [{"start_ns": T0 + (i // 10) * 10**9, "path": "/v1/chat/completions",
             "method": "POST", "input_tokens": 600, "output_tokens": 5}
            for i in range(40)]  # fmt: skip
    archive = write_plain(tmp_path / "ticks.msgpack", maps)
    config = ScheduleConfig([archive], amplify=2.0)
    builder = RequestBuilder(model_map={}, force_lengths=True, prompts=PromptMaker(0))
    firsts = set()
    for item in schedule(config, plan(config)):
        body = json.loads(builder.build(item).body or b"")
        firsts.add(tuple(_words(body)[:BLOCK_TOKENS]))
    assert len(firsts) == 80


def test_the_words_and_the_chat_overhead_are_the_tokenizers() -> None:
    # Kept as data so that a replay starts without building the tokenizer: each word is
    # one token with its leading space in both encodings, the list is what
    # scripts/single_token_words.py makes of them, and one user message adds exactly
    # CHAT_OVERHEAD_TOKENS around its content, as cl100k_base counts them.
    words = prompts.single_token_words()
    assert len(words) == 8192 == len(set(words))
    for encoding in ("cl100k_base", "o200k_base"):
        enc = get(encoding)
        split = [w for w in words if len(enc.encode_ordinary(" " + w)) != 1]
        assert not split, f"not one token each in {encoding}: {split[:10]}"
    script = REPO / "scripts" / "single_token_words.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    one = count_tokens(chat_text([{"role": "user", "content": "x"}]))
    assert one - 1 == prompts.CHAT_OVERHEAD_TOKENS == PromptMaker(0).overhead


def test_a_prompt_of_many_words_is_as_many_tokens_at_every_entropy() -> None:
    enc, maker = get(), PromptMaker(5)
    for bits in (0.0, 3.0, 9.0, 13.0):
        for tokens in (1, 39, 41, 5_000):
            text = maker.prompt(tokens, [11, 12], b"r", bits).decode("ascii")
            assert len(enc.encode_ordinary(text)) == tokens, (bits, tokens)
    # Short prompts are joined word by word, longer ones gathered by numpy: the same
    # draws (SHAKE's output is a stream) make the same words either way.
    short, long = (maker.prompt(n, None, b"r").split() for n in (40, 41))
    assert short == long[:40]


def test_bodies_made_from_one_kept_frame_differ_only_in_their_prompt() -> None:
    """The JSON around a synthetic prompt is made once per route, model, stream and
    budget: later bodies are the same but for the prompt, and a target's refusal of
    min_tokens/ignore_eos, a --body-drop of the prompt and --model-map still show."""

    def build(builder: RequestBuilder, trace: int, *, stream: bool = True) -> dict[str, Any]:
        record = Record(start_ns=1, trace_id=trace.to_bytes(16, "big"), method="POST",
                        path="/v1/chat/completions", model="prod", stream=stream,
                        input_tokens=40)  # fmt: skip
        spec = builder.build(Planned(0.0, record, 0, False, 8))
        assert spec.body is not None and spec.stream is (json.loads(spec.body)["stream"])
        body: dict[str, Any] = json.loads(spec.body)
        return body

    builder = RequestBuilder(model_map={"prod": "staging"}, force_lengths=True,
                             prompts=PromptMaker(0))  # fmt: skip
    first, second = build(builder, 1), build(builder, 2)
    assert _words(first) != _words(second)
    for body in (first, second):
        body["messages"][0]["content"] = ""
    assert first == second == {
        "model": "staging", "stream": True, "messages": [{"role": "user", "content": ""}],
        "stream_options": {"include_usage": True}, "max_tokens": 8, "min_tokens": 8,
        "ignore_eos": True,
    }  # fmt: skip
    assert "stream_options" not in build(builder, 3, stream=False)
    assert builder.rejects_forced_fields("unknown field: min_tokens")
    refused = build(builder, 4)
    assert "min_tokens" not in refused and "ignore_eos" not in refused
    assert refused["max_tokens"] == 8

    edits = BodyEdits(assign={"stream": False}, drop=["messages"])
    dropped = RequestBuilder(model_map={}, force_lengths=False, prompts=PromptMaker(0),
                             edits=edits)  # fmt: skip
    body = build(dropped, 5, stream=False)
    assert body == {"model": "prod", "stream": False, "max_tokens": 8}
