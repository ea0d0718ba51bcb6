"""Prompt tokens when the server does not say: counted, with the chat template's overhead,
and calibrated to what the same model's server reported for other requests.

A chat prompt is more than its messages' text: the model's chat template wraps each
message in special tokens and primes the reply. Counting only the text put short
prompts at half their true count (6 against llama.cpp's 13 for gemma), and in the
wrong input-length bucket. The estimate is

    tokens(texts) + per_message x messages + fixed

with the template's numbers per model family where known (``TEMPLATES``), and
OpenAI's documented ones otherwise (3 a message, the role's token, 3 to prime the
reply). The tokenizer is cl100k_base, which is not every model's: so where the
server does report usage for a model (non-streamed requests, or a server that
honours include_usage), ``Calibration`` fits true = a + b x estimate over those
requests and corrects the model's other estimates with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "OPENAI",
    "TEMPLATES",
    "Calibration",
    "Template",
    "estimate_prompt_tokens",
    "template_for",
]


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


RENDERED_PER_MESSAGE = 3
"""Tokens ``chat_text`` itself puts around each message: the role and two newlines."""


def estimate_prompt_tokens(rendered: int, messages: int, model: str | None) -> int:
    """A chat prompt's tokens as the model's template has it, from ``rendered``: the
    cl100k count of ``chat_text(messages)`` (what the proxy tokenises for prefix hashes).

    >>> estimate_prompt_tokens(rendered=9, messages=1, model="gemma-3")  # 9 - 3 + 5 + 4
    15
    """
    template = template_for(model)
    return rendered + messages * (template.per_message - RENDERED_PER_MESSAGE) + template.fixed


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
