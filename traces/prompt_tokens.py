"""Prompt tokens when the server does not say: counted, with the chat template's overhead,
and calibrated to what the same model's server reported for other requests.

A chat prompt is more than its messages' text: the model's chat template wraps each
message in special tokens and primes the reply. Counting only the text put short
prompts at half their true count (6 against llama.cpp's 13 for gemma), and in the
wrong input-length bucket. The estimate is

    tokens(contents) + per_message x messages + fixed

with the template's numbers per model family where known (``TEMPLATES``), and
OpenAI's documented ones otherwise (3 a message, the role's token, 3 to prime the
reply). The tokenizer is cl100k_base, which is not every model's: so where the
server does report usage for a model (non-streamed requests, or a server that
honours include_usage), ``Calibration`` fits true = a + b x estimate over those
requests and corrects the model's other estimates with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tailreplay.traces.tokens import count_tokens

__all__ = ["TEMPLATES", "Calibration", "Template", "estimate_prompt_tokens", "template_for"]


@dataclass(frozen=True, slots=True)
class Template:
    per_message: int
    """Special tokens and the role around each message."""
    fixed: int
    """Begin-of-text and the reply's priming."""


TEMPLATES: dict[str, Template] = {
    # <|start_header_id|>role<|end_header_id|>\n\n ... <|eot_id|>; BOS; the reply's header.
    "llama": Template(per_message=5, fixed=5),
    # <start_of_turn>role\n ... <end_of_turn>\n; BOS; <start_of_turn>model\n.
    "gemma": Template(per_message=5, fixed=4),
    # ChatML: <|im_start|>role\n ... <|im_end|>\n; <|im_start|>assistant\n.
    "qwen": Template(per_message=5, fixed=3),
    # The User and Assistant markers (full-width bars in the template); BOS.
    "deepseek": Template(per_message=2, fixed=2),
    # [INST] ... [/INST]; BOS.
    "mistral": Template(per_message=4, fixed=1),
}
OPENAI = Template(per_message=4, fixed=3)
"""OpenAI's count: 3 tokens a message plus the role, 3 to prime the reply."""


def template_for(model: str | None) -> Template:
    """The chat template's overhead for ``model``, by family name in it."""
    name = (model or "").lower()
    for family, template in TEMPLATES.items():
        if family in name:
            return template
    return OPENAI


def estimate_prompt_tokens(messages: Sequence[Any], model: str | None) -> int:
    """Tokens of a chat prompt as the model's template would have it (cl100k counts)."""
    template = template_for(model)
    contents = 0
    count = 0
    for m in messages:
        if not isinstance(m, dict):
            continue
        count += 1
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(
                p.get("text", "")
                for p in content
                if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        if isinstance(content, str) and content:
            contents += count_tokens(content)
    return contents + template.per_message * count + template.fixed


_MIN_POINTS = 8


@dataclass
class _Fit:
    """Running sums for a least-squares line, in bounded memory."""

    n: int = 0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0

    def add(self, x: float, y: float) -> None:
        self.n += 1
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.sxy += x * y

    def line(self) -> tuple[float, float] | None:
        """(a, b) of y = a + b·x, or None until there is enough spread to fit."""
        if self.n < _MIN_POINTS:
            return None
        var = self.n * self.sxx - self.sx * self.sx
        if var <= 1e-9 * max(self.sxx, 1.0) * self.n:
            b = self.sy / self.sx if self.sx else 1.0  # one prompt length: a ratio
            return 0.0, b
        b = (self.n * self.sxy - self.sx * self.sy) / var
        return (self.sy - b * self.sx) / self.n, b


@dataclass
class Calibration:
    """Per model, what the server reported against our estimate: estimates corrected by it.

    >>> c = Calibration(); c.observe("gemma", estimated=6, reported=13)  # repeated ...
    >>> c.correct("gemma", 6)  # once fitted: about 13
    """

    models: dict[str, _Fit] = field(default_factory=dict)
    max_models: int = 64
    """Bounded: model names come from traffic."""

    def observe(self, model: str | None, *, estimated: int, reported: int) -> None:
        key = model or ""
        fit = self.models.get(key)
        if fit is None:
            if len(self.models) >= self.max_models:
                return
            fit = self.models[key] = _Fit()
        fit.add(estimated, reported)

    def correct(self, model: str | None, estimated: int) -> int:
        """The estimate as the model's server would count it, once fitted."""
        fit = self.models.get(model or "")
        line = fit.line() if fit is not None else None
        if line is None:
            return estimated
        a, b = line
        return max(1, round(a + b * estimated))
