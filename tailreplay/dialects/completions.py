"""OpenAI text completions (``/v1/completions``): a prompt in, text out.

Streams are ``text_completion`` chunks carrying ``text``, ending with ``data: [DONE]``.
"""

from __future__ import annotations

from typing import Any

from tailreplay.dialects.base import BadRequest, Dialect, ReplyWriter, SimAnswer, SimAsk, sse
from tailreplay.dialects.chat import (
    dumps,
    openai_common,
    openai_lengths,
    openai_token_kind,
    openai_usage_event,
)
from tailreplay.dialects.chat import openai_usage as _usage

__all__ = ["Completions"]


class Completions(Dialect):
    name = "completions"
    routes = ("/v1/completions",)
    operation = "text_completion"
    budget_fields = ("max_tokens",)
    stream_ends = (b"[DONE]",)
    usage_asked = True

    def prompt_parts(self, body: dict[str, Any]) -> list[str] | None:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            prompt = "".join(prompt)
        return [prompt] if isinstance(prompt, str) else None

    def token_kind(self, event: bytes) -> int:
        return openai_token_kind(event)

    def answer_text(self, doc: Any) -> str | None:
        try:
            text = doc["choices"][0].get("text")
        except (KeyError, IndexError, TypeError, AttributeError):
            return None
        return text if isinstance(text, str) else None

    def synthetic(self, model: str, stream: bool, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "stream": stream, "prompt": prompt}
        self.ask_usage(body)
        return body

    def sim_ask(self, body: dict[str, Any], headers: dict[str, str]) -> SimAsk:
        p = body.get("prompt")
        if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
            p = p[0]
        if not isinstance(p, str):
            raise BadRequest("'prompt' must be a string", "prompt")
        model, stream, include_usage = openai_common(body)
        max_tokens, min_tokens, ignore_eos = openai_lengths(body, self.budget_fields)
        return SimAsk(p, model, max_tokens, min_tokens, ignore_eos, stream, include_usage)

    def writer(self, answer: SimAnswer) -> ReplyWriter:
        return _TextWriter(answer)


class _TextWriter(ReplyWriter):
    def _chunk(self, text: str, finish: str | None) -> bytes:
        a = self.answer
        body: dict[str, Any] = {
            "id": a.id,
            "object": "text_completion",
            "created": a.created,
            "model": self.model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
        }
        if a.ask.include_usage:
            body["usage"] = None
        return sse(dumps(body))

    def token(self, text: str, index: int) -> bytes:
        return self._chunk(text, None)

    def tail(self, completion_tokens: int) -> bytes:
        a = self.answer
        out = self._chunk("", a.finish)
        if a.ask.include_usage:
            out += openai_usage_event(a, "text_completion", self.model, completion_tokens)
        return out + sse(b"[DONE]")

    def whole(self, tokens: list[str]) -> dict[str, Any]:
        a = self.answer
        choice = {"index": 0, "text": "".join(tokens), "finish_reason": a.finish, "logprobs": None}
        return {
            "id": a.id,
            "object": "text_completion",
            "created": a.created,
            "model": self.model,
            "choices": [choice],
            "usage": _usage(a, len(tokens)),
        }
