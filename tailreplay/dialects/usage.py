"""A response's token counts as the server reported them, under the names servers use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["COUNT_LIMIT", "Usage", "count"]

COUNT_LIMIT = 1 << 32
"""Token counts an archive holds are below this (``traces/archive/validate.py``'s _TOKENS)."""

# Each count under the names servers give it: OpenAI's chat and completions, its
# Responses API (input/output), vLLM, SGLang, TGI and llama.cpp (OpenAI's names),
# nested as OpenAI nests the details. Anthropic's are its dialect's own
# (``tailreplay/dialects/messages.py``).
_PROMPT = (("prompt_tokens",), ("input_tokens",))
_COMPLETION = (("completion_tokens",), ("output_tokens",))
_CACHED = (
    ("prompt_tokens_details", "cached_tokens"),
    ("input_tokens_details", "cached_tokens"),
    ("cache_read_input_tokens",),
)
_REASONING = (
    ("completion_tokens_details", "reasoning_tokens"),
    ("output_tokens_details", "reasoning_tokens"),
)
_COUNTS = (
    ("prompt_tokens", _PROMPT),
    ("completion_tokens", _COMPLETION),
    ("cached_tokens", _CACHED),
    ("reasoning_tokens", _REASONING),
)
"""Each count's paths in a usage object: a key, or a key and one under it."""
_PLAIN = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})
"""A usage object's keys when it has chat's counts and nothing else."""


def count(value: Any) -> int | None:
    """``value`` if it is a count an archive holds: an int (not a bool; JSON's numbers
    decode to int exactly) with 0 <= v < 2^32 (docs/archive-format.md); else None."""
    return value if type(value) is int and 0 <= value < COUNT_LIMIT else None


@dataclass
class Usage:
    """What the server reported of a response's tokens (None: not reported)."""

    prompt_tokens: int | None = None
    """Every prompt token, those served from a cache included."""
    completion_tokens: int | None = None
    """All generated tokens, reasoning included."""
    cached_tokens: int | None = None
    """Prompt tokens served from the prefix cache."""
    reasoning_tokens: int | None = None
    """Generated tokens spent thinking before the answer (inside completion_tokens)."""
    finish_reason: str | None = None

    def update(self, fields: dict[str, Any]) -> None:
        """Set what one usage object reports under OpenAI's names; counts it does not
        report stay as they were."""
        if fields.keys() <= _PLAIN:
            # Chat's usage without details (most servers'): its two counts by name.
            for name in ("prompt_tokens", "completion_tokens"):
                if (value := count(fields.get(name))) is not None:
                    setattr(self, name, value)
            return
        for name, paths in _COUNTS:
            for path in paths:
                value = fields.get(path[0])
                if len(path) == 2:
                    value = value.get(path[1]) if isinstance(value, dict) else None
                if (value := count(value)) is not None:
                    setattr(self, name, value)
                    break
