"""Prompt tokens when the server does not say: the chat template's overhead, then calibration
to what the same model's server reported."""

from __future__ import annotations

import random

import pytest

from tailreplay.dialects.prompt_text import chat_text
from tailreplay.proxy.prompt_tokens import (
    OPENAI,
    RENDERED_PER_MESSAGE,
    TEMPLATES,
    Calibration,
    estimate_prompt_tokens,
    template_for,
)
from tailreplay.traces.text.tokens import count_tokens


@pytest.mark.parametrize(
    ("model", "family"),
    [("meta-llama/Llama-3.1-8B-Instruct", "llama"), ("gemma-3-270m", "gemma"),
     ("Qwen/Qwen2.5-7B", "qwen"), ("deepseek-r1", "deepseek"), ("mistral-small", "mistral")],
)  # fmt: skip
def test_families_get_their_templates_overhead(model: str, family: str) -> None:
    assert template_for(model) == TEMPLATES[family]
    assert template_for("gpt-4o") == template_for(None) == OPENAI


def test_the_estimate_adds_the_templates_tokens_to_the_texts() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = count_tokens(chat_text(messages))
    # chat_text's own role-and-newlines (about 3 a message) give way to the template's.
    per = 5 - RENDERED_PER_MESSAGE
    assert estimate_prompt_tokens(rendered, 2, "gemma") == rendered + 2 * per + 4
    assert estimate_prompt_tokens(rendered, 2, "gpt-4o") == rendered + 2 * 1 + 3
    # llama.cpp's server counts 15 for this with gemma's template (its tokenizer splits
    # digits); the text alone is 7: calibration to reported usage closes the rest.
    count = [{"role": "user", "content": "Count to 3."}]
    assert count_tokens(chat_text(count)) == 7
    assert estimate_prompt_tokens(7, 1, "gemma") == 13


def test_calibration_fits_what_the_server_reported_per_model() -> None:
    rng = random.Random(1)
    cal = Calibration()
    # A server whose tokenizer counts 30% more than cl100k, plus 7 of its own.
    for _ in range(40):
        est = rng.randint(5, 500)
        cal.observe("gemma", estimated=est, reported=round(7 + 1.3 * est))
    assert cal.correct("gemma", 6) == pytest.approx(7 + 1.3 * 6, abs=1)
    assert cal.correct("gemma", 300) == pytest.approx(7 + 1.3 * 300, abs=1)
    assert cal.correct("other", 6) == 6  # nothing observed: the estimate as it is
    few = Calibration()
    for _ in range(3):
        few.observe("m", estimated=10, reported=20)
    assert few.correct("m", 10) == 10  # too few to fit


def test_one_prompt_length_calibrates_as_a_ratio_and_models_are_bounded() -> None:
    cal = Calibration(max_models=2)
    for _ in range(10):
        cal.observe("a", estimated=6, reported=13)
    assert cal.correct("a", 6) == 13
    for model in ("b", "c", "d"):
        cal.observe(model, estimated=1, reported=1)
    assert set(cal.models) == {"a", "b"}
