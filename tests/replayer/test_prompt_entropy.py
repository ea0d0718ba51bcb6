"""Prompt entropy: captured without the prompt, and matched by synthetic prompts.

The proxy keeps each prompt's token-level entropy and repetition (never its text, in
the default body mode); a replay of records without bodies draws its synthetic
prompts to the recorded entropy, within a tenth of a bit as cl100k_base counts it,
and says what it asked for and what it drew.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tailreplay.dialects.prompt_text import chat_text
from tailreplay.replayer.prompts import PromptMaker
from tailreplay.sim.server import SimConfig, serve
from tailreplay.traces.text.prompt_stats import prompt_stats
from tailreplay.traces.text.tokens import get
from tests.helpers import write_plain
from tests.proxy.test_proxy_safety import QUICK
from tests.proxy_helpers import proxy_to, records

T0 = 1_700_000_000 * 10**9
PROMPT = "the cat sat on the mat and the dog sat on the log " * 20 + "then it rained"


async def test_the_proxy_keeps_a_prompts_entropy_not_its_text(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": PROMPT}]
    body = {"model": "m", "messages": messages, "max_tokens": 4}
    async with (
        serve(SimConfig(profile=QUICK, port=0)) as sim,
        proxy_to(sim, tmp_path) as proxy,
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/v1/chat/completions", json=body) as r,
    ):
        assert r.status == 200
    (rec,) = records(tmp_path)
    expected = prompt_stats(get().encode_ordinary(chat_text(messages)))
    assert expected is not None
    assert (rec.prompt_entropy_mbits, rec.prompt_repetition_pm) == expected
    assert expected[1] > 800  # a repetitive prompt: most tokens repeat an earlier one
    assert rec.req_body is None  # the default body mode keeps no text
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("*.msgpack*"))
    assert b"the cat sat" not in raw


@pytest.mark.parametrize(
    ("bits", "tokens"),
    [(2.5, 400), (4.0, 1000), (6.5, 3000), (9.0, 1000), (10.0, 2000), (12.0, 20_000)],
)
def test_synthetic_prompts_are_drawn_to_the_recorded_entropy(bits: float, tokens: int) -> None:
    maker = PromptMaker(seed=1)
    text = maker.prompt(tokens, None, b"record-1", bits).decode()
    got = prompt_stats(get().encode_ordinary(text))
    assert got is not None and abs(got[0] / 1000 - bits) <= 0.1, got
    tally = maker.entropy.summary()
    assert tally is not None and tally.prompts == 1 and tally.intended_bits == bits
    assert tally.achieved_bits == pytest.approx(got[0] / 1000, abs=0.01)


def test_a_replay_says_what_entropy_it_asked_for_and_drew(tmp_path: Path) -> None:
    maps = [{"start_ns": T0 + i * 10**8, "trace_id": bytes([i + 1]) * 16, "span_id": b"s" * 8,
             "method": "POST", "path": "/v1/chat/completions", "model": "m", "stream": False,
             "input_tokens": 800, "output_tokens": 4, "prompt_entropy_mbits": 5000}
            for i in range(10)]  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", maps)
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", str(archive), "--out",
         str(tmp_path / "r.msgpack"), "--json", str(tmp_path / "s.json"), "--no-preflight"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    entropy = json.loads((tmp_path / "s.json").read_text())["prompt_entropy"]
    assert entropy["prompts"] == 10 and entropy["intended_bits"] == 5.0
    assert abs(entropy["achieved_bits"] - 5.0) <= 0.1
    assert "synthetic prompts' entropy: asked 5.00 bits/token, drawn" in done.stdout


def _tpot_p50(tmp_path: Path, name: str, mbits: int) -> float:
    maps = [{"start_ns": T0 + i * 2 * 10**8, "trace_id": bytes([i + 1]) * 16,
             "span_id": b"s" * 8, "method": "POST", "path": "/v1/chat/completions",
             "model": "m", "stream": True, "input_tokens": 600, "output_tokens": 64,
             "prompt_entropy_mbits": mbits} for i in range(20)]  # fmt: skip
    archive = write_plain(tmp_path / f"{name}.msgpack", maps)
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", str(archive), "--out",
         str(tmp_path / f"{name}-r.msgpack"), "--json", str(tmp_path / f"{name}.json"),
         "--no-preflight", "--sim-arg=--spec-tokens=4"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return float(json.loads((tmp_path / f"{name}.json").read_text())["tpot_ms"]["p50"])


def test_speculative_decoding_is_faster_on_predictable_prompts(tmp_path: Path) -> None:
    # The simulator accepts a draft token with 0.75 after a 2-bit prompt and 0.25 after
    # a 7-bit one: about 3.0 against 1.3 tokens a step, each step 40% dearer.
    predictable, varied = _tpot_p50(tmp_path, "low", 2000), _tpot_p50(tmp_path, "high", 7000)
    assert predictable < 0.7 * varied, (predictable, varied)
