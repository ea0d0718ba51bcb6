"""OpenAI chat completions (``/v1/chat/completions``): messages in, a message out.

Streams are ``chat.completion.chunk`` events, one token each on OpenAI, vLLM, SGLang
and llama.cpp, ending with ``data: [DONE]``; a token is a non-empty ``content``,
tool-call ``arguments`` or thinking (``reasoning_content``, ``reasoning``) string.
Usage comes in the last chunk when ``stream_options.include_usage`` asked for it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tailreplay.dialects.base import (
    ANSWER,
    NOT_TOKEN,
    REASONING,
    BadRequest,
    Dialect,
    ReplyWriter,
    SimAnswer,
    SimAsk,
    int_field,
    sse,
    tool_input,
    tool_input_piece,
)
from tailreplay.dialects.prompt_text import chat_parts

__all__ = ["Chat", "openai_lengths", "openai_token_kind"]

_TEXT = re.compile(
    rb'"(content|text|arguments|delta|reasoning_content|reasoning|thinking)"\s*:\s*"(?!")'
)
_THINKING = frozenset((b"reasoning_content", b"reasoning", b"thinking"))


def openai_token_kind(event: bytes) -> int:
    """A chunk of OpenAI's chat or completions stream: a token when a text field is
    non-empty (``text`` and ``delta`` too: TGI's and older servers' names)."""
    keys = _TEXT.findall(event)
    if not keys:
        return NOT_TOKEN
    if any(key in _THINKING for key in keys):
        # A thinking chunk may nest its text again (OpenRouter's ``reasoning_details``,
        # Magistral's thinking parts): a ``text`` beside a thinking key is thought.
        answer = any(key not in _THINKING and key != b"text" for key in keys)
        return ANSWER if answer else REASONING
    return ANSWER


def openai_lengths(body: dict[str, Any], names: tuple[str, ...]) -> tuple[int | None, int, bool]:
    """(max_tokens, min_tokens, ignore_eos) as vLLM reads them, checked for consistency:
    the budget is the first of ``names`` given (``max_completion_tokens`` before
    ``max_tokens``, as the proxy records it)."""
    given = next(((n, v) for n in names if (v := int_field(body, n)) is not None), None)
    name, max_tokens = given if given is not None else (names[-1], None)
    if max_tokens is not None and max_tokens <= 0:
        raise BadRequest(f"'{name}' must be at least 1", name)
    min_tokens = int_field(body, "min_tokens") or 0
    if min_tokens < 0:
        raise BadRequest("'min_tokens' must not be negative", "min_tokens")
    if max_tokens is not None and min_tokens > max_tokens:
        raise BadRequest(f"'min_tokens' must not exceed '{name}'", "min_tokens")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise BadRequest("'ignore_eos' must be a boolean", "ignore_eos")
    return max_tokens, min_tokens, ignore_eos


def openai_common(body: dict[str, Any]) -> tuple[str | None, bool, bool]:
    """(model, stream, include_usage), checked as OpenAI's routes check them."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string", "model")
    if int_field(body, "n") not in (None, 1):
        raise BadRequest("only n=1 is supported", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    return model, stream, bool(options and options.get("include_usage"))


def _forced_tool(body: dict[str, Any]) -> str | None:
    """The function a chat request forces (``tool_choice`` naming one, or "required")."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if not isinstance(tools, list) or not tools:
        return None
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        return name if isinstance(name, str) else None
    if choice == "required":
        first = tools[0].get("function") if isinstance(tools[0], dict) else None
        name = first.get("name") if isinstance(first, dict) else None
        return name if isinstance(name, str) else "tool"
    return None


class Chat(Dialect):
    name = "chat"
    routes = ("/v1/chat/completions",)
    operation = "chat"
    budget_fields = ("max_completion_tokens", "max_tokens")
    chat_prompt = True
    stream_ends = (b"[DONE]",)
    usage_asked = True

    def prompt_parts(self, body: dict[str, Any]) -> list[str] | None:
        messages = body.get("messages")
        return chat_parts(messages) if isinstance(messages, list) else None

    def message_count(self, body: dict[str, Any]) -> int:
        messages = body.get("messages")
        return len(messages) if isinstance(messages, list) else 0

    def token_kind(self, event: bytes) -> int:
        return openai_token_kind(event)

    def answer_text(self, doc: Any) -> str | None:
        try:
            text = doc["choices"][0]["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            return None
        return text if isinstance(text, str) else None

    def synthetic(self, model: str, stream: bool, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "stream": stream,
            "messages": [{"role": "user", "content": prompt}],
        }
        self.ask_usage(body)
        return body

    def sim_ask(self, body: dict[str, Any], headers: dict[str, str]) -> SimAsk:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty array", "messages")
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadRequest("each message must be an object with a 'role'", "messages")
            if not isinstance(m.get("content"), str | list | None):
                raise BadRequest("message 'content' must be a string or an array", "messages")
        model, stream, include_usage = openai_common(body)
        max_tokens, min_tokens, ignore_eos = openai_lengths(body, self.budget_fields)
        return SimAsk(
            prompt="".join(chat_parts(messages)),
            model=model,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=ignore_eos,
            stream=stream,
            include_usage=include_usage,
            tool=_forced_tool(body),
        )

    def writer(self, answer: SimAnswer) -> ReplyWriter:
        return _ChatWriter(answer)


def openai_usage(answer: SimAnswer, completion_tokens: int) -> dict[str, Any]:
    """OpenAI's usage map, with vLLM's and OpenAI's cache and reasoning details."""
    usage: dict[str, Any] = {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": answer.prompt_tokens + completion_tokens,
    }
    if answer.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": answer.cached_tokens}
    if answer.reasoning:
        thought = min(answer.reasoning, completion_tokens)
        usage["completion_tokens_details"] = {"reasoning_tokens": thought}
    return usage


def openai_usage_event(answer: SimAnswer, kind: str, model: str, completion_tokens: int) -> bytes:
    """The usage-only event before ``[DONE]`` (``choices`` empty), as OpenAI sends it
    when ``include_usage`` asked; ``kind`` is the chunks' ``object``."""
    body = {
        "id": answer.id,
        "object": kind,
        "created": answer.created,
        "model": model,
        "choices": [],
        "usage": openai_usage(answer, completion_tokens),
    }
    return sse(dumps(body))


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


class _ChatWriter(ReplyWriter):
    def __init__(self, answer: SimAnswer) -> None:
        super().__init__(answer)
        self.call_id = "call_" + answer.id[-24:]

    def _chunk(self, delta: dict[str, Any], finish: str | None, usage: Any = None) -> bytes:
        a = self.answer
        body: dict[str, Any] = {
            "id": a.id,
            "object": "chat.completion.chunk",
            "created": a.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if a.ask.include_usage:
            body["usage"] = usage
        return sse(dumps(body))

    def token(self, text: str, index: int) -> bytes:
        a = self.answer
        delta: dict[str, Any] = {"role": "assistant"} if index == 0 else {}
        if index < a.reasoning:
            delta["reasoning_content"] = text
        elif a.ask.tool is not None:
            piece = tool_input_piece(a, text, index)
            call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
            if index == a.reasoning:
                call.update(id=self.call_id, type="function")
                call["function"]["name"] = a.ask.tool
            delta["tool_calls"] = [call]
        else:
            delta["content"] = text
        return self._chunk(delta, None)

    def tail(self, completion_tokens: int) -> bytes:
        a = self.answer
        out = self._chunk({}, a.finish)
        if a.ask.include_usage:
            out += openai_usage_event(a, "chat.completion.chunk", self.model, completion_tokens)
        return out + sse(b"[DONE]")

    def whole(self, tokens: list[str]) -> dict[str, Any]:
        a = self.answer
        thought, answer = tokens[: a.reasoning], "".join(tokens[a.reasoning :])
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        if a.ask.tool is not None:
            function = {"name": a.ask.tool, "arguments": tool_input(answer)}
            message["content"] = None
            message["tool_calls"] = [{"id": self.call_id, "type": "function", "function": function}]
        if thought:
            message["reasoning_content"] = "".join(thought)
        return {
            "id": a.id,
            "object": "chat.completion",
            "created": a.created,
            "model": self.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": a.finish, "logprobs": None}
            ],
            "usage": openai_usage(a, len(tokens)),
        }
