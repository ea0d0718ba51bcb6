"""Prompts captured through the proxy without their text replay with synthetic prompts
of the entropy each record kept: 1,000 to 3,000 tokens at about 2, 6, 8 and 10 bits
a token, each group sharing a 1,024-token system prompt (so most of each prompt's
blocks are drawn from its prefix hashes, which must follow the record's entropy
too). Each synthetic prompt, rendered and counted by cl100k_base as the proxy
counts, is exactly as long as its record and within 0.2 bit a token of it."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from tailreplay.dialects.prompt_text import chat_text
from tailreplay.replayer.prompts import PromptMaker
from tailreplay.replayer.request import RequestBuilder
from tailreplay.replayer.schedule import Planned
from tailreplay.sim.server import SimConfig, serve
from tailreplay.traces.text.prompt_stats import prompt_stats
from tailreplay.traces.text.tokens import get
from tests.proxy.test_proxy_safety import QUICK
from tests.proxy_helpers import proxy_to, records


def _vocabulary() -> list[str]:
    """Words of one cl100k_base token each with a leading space, none from the
    replayer's own list: the captured prompts are not the synthetic prompts' text."""
    encoder, taken = get(), set(PromptMaker().words)
    out = []
    for token in range(5_000, 100_000):
        text = encoder.decode([token])
        word = text[1:]
        plain = text.startswith(" ") and word.isalpha() and word.islower() and len(word) >= 4
        if plain and word not in taken and len(encoder.encode_ordinary(text)) == 1:
            out.append(word)
        if len(out) == 4_000:
            break
    return out


WORDS = _vocabulary()


def _words(rng: np.random.Generator, count: int, vocabulary: int) -> str:
    """``count`` words drawn from the first ``vocabulary`` words, Zipf-weighted."""
    weights = 1.0 / np.arange(1, vocabulary + 1) ** 0.6
    picks = rng.choice(vocabulary, size=count, p=weights / weights.sum())
    return " ".join(WORDS[i] for i in picks)


@pytest.mark.parametrize(("group", "vocabulary"), [("2", 5), ("6", 90), ("8", 450), ("10", 4_000)])
async def test_captured_prompts_replay_at_their_recorded_entropy(
    tmp_path: Path, group: str, vocabulary: int
) -> None:
    rng = np.random.default_rng(int(float(group) * 10))
    system = _words(rng, 1024, vocabulary)
    async with (
        serve(SimConfig(profile=QUICK, port=0)) as sim,
        proxy_to(sim, tmp_path) as proxy,
        aiohttp.ClientSession() as s,
    ):
        for length in np.linspace(0, 1_900, 8).astype(int):
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": _words(rng, int(length), vocabulary)},
            ]
            body = {"model": "m", "messages": messages, "max_tokens": 2}
            async with s.post(proxy.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200
    captured = records(tmp_path)
    assert len(captured) == 8
    builder = RequestBuilder(model_map={}, force_lengths=True, prompts=PromptMaker(seed=3))
    encoder, gaps = get(), []
    for i, rec in enumerate(captured):
        assert rec.req_body is None and rec.prefix_hashes  # no text kept; blocks hashed
        assert rec.input_tokens is not None and 600 <= rec.input_tokens <= 3_200
        spec = builder.build(Planned(0.0, rec, 0, False, 2, key=bytes([i]) * 8))
        assert spec.body is not None
        messages = json.loads(spec.body)["messages"]
        tokens = encoder.encode_ordinary(chat_text(messages))
        assert len(tokens) == rec.input_tokens
        stats = prompt_stats(tokens)
        assert stats is not None and rec.prompt_entropy_mbits is not None
        gaps.append(stats[0] - rec.prompt_entropy_mbits)
    # Each prompt within 0.2 bit of its record; over the group, within 0.05 (blocks
    # drawn from prefix hashes take a vocabulary of the record's length a little
    # rounded, which shows at 10 bits, where the words used grow with the length).
    assert max(map(abs, gaps)) <= 200 and abs(np.mean(gaps)) <= 50, gaps
    recorded = np.mean([r.prompt_entropy_mbits or 0 for r in captured]) / 1000
    assert abs(recorded - float(group)) <= 0.5  # the group is at about its entropy
