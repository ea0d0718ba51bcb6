"""Anthropic's Messages API (``/v1/messages``), as Anthropic, vLLM and gateways serve it.

A request must give ``max_tokens`` and is sent with an ``anthropic-version`` header.
A stream is named events: ``message_start`` (usage with the input tokens),
``content_block_start``, ``ping``, ``content_block_delta`` (``text_delta``,
``thinking_delta``, ``input_json_delta`` for ``tool_use``: the token events;
``signature_delta`` is not one), ``content_block_stop``, ``message_delta`` (the stop
reason and the output tokens) and ``message_stop``. Anthropic counts
``input_tokens`` without the cached ones; a record's input tokens are all of them
(``input_tokens + cache_creation_input_tokens + cache_read_input_tokens``), as
OpenAI's ``prompt_tokens`` are.
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
from tailreplay.dialects.chat import dumps, openai_lengths
from tailreplay.dialects.prompt_text import chat_parts, content_text
from tailreplay.dialects.usage import Usage, count

__all__ = ["VERSION", "Messages"]

VERSION = "2023-06-01"
"""The ``anthropic-version`` a replay sends when the run gives none."""

_DELTA = re.compile(rb'"type"\s*:\s*"(text_delta|thinking_delta|input_json_delta)"')
_FILLED = re.compile(rb'"(?:text|thinking|partial_json)"\s*:\s*"(?!")')
_STOP = re.compile(rb'"stop_reason"\s*:\s*"([a-z_]+)"')
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Anthropic's stop reasons in OpenAI's words: one finish reason means one thing."""


def _system_text(system: Any) -> str | None:
    if isinstance(system, str):
        return system
    return content_text(system) if isinstance(system, list) else None


def _forced_tool(body: dict[str, Any]) -> str | None:
    tools, choice = body.get("tools"), body.get("tool_choice")
    if not isinstance(tools, list) or not tools or not isinstance(choice, dict):
        return None
    if choice.get("type") == "tool" and isinstance(choice.get("name"), str):
        return str(choice["name"])
    if choice.get("type") == "any":
        name = tools[0].get("name") if isinstance(tools[0], dict) else None
        return name if isinstance(name, str) else "tool"
    return None


def _thinking(body: dict[str, Any]) -> int | None:
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget = int_field(thinking, "budget_tokens")
    if budget is None or budget < 1:
        raise BadRequest("thinking.budget_tokens must be a positive integer", "thinking")
    return budget


class Messages(Dialect):
    name = "messages"
    routes = ("/v1/messages",)
    operation = "chat"
    budget_fields = ("max_tokens",)
    chat_prompt = True
    stream_ends = (b'"message_stop"',)
    headers = (("anthropic-version", VERSION),)

    def prompt_parts(self, body: dict[str, Any]) -> list[str] | None:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        system = _system_text(body.get("system"))
        head = [f"system\n{system}\n"] if system else []
        return [*head, *chat_parts(messages)]

    def message_count(self, body: dict[str, Any]) -> int:
        messages = body.get("messages")
        return len(messages) if isinstance(messages, list) else 0

    def token_kind(self, event: bytes) -> int:
        m = _DELTA.search(event)
        if m is None or _FILLED.search(event) is None:
            return NOT_TOKEN  # an empty delta carries no token
        return REASONING if m.group(1) == b"thinking_delta" else ANSWER

    def fold_usage(self, usage: Usage, fields: dict[str, Any]) -> None:
        given = count(fields.get("input_tokens"))
        cached = count(fields.get("cache_read_input_tokens"))
        written = count(fields.get("cache_creation_input_tokens"))
        # A later map repeating input_tokens without the cache's counts (some gateways'
        # message_delta) leaves the whole count the first map gave.
        repeated = cached is None and written is None and usage.prompt_tokens is not None
        if given is not None and not repeated:
            usage.prompt_tokens = count(given + (written or 0) + (cached or 0))
        if cached is not None:
            usage.cached_tokens = cached
        if (output := count(fields.get("output_tokens"))) is not None:
            usage.completion_tokens = output

    def finish_reason(self, text: bytes) -> str | None:
        found = _STOP.findall(text)
        return _FINISH.get(found[-1].decode(), found[-1].decode()) if found else None

    def answer_text(self, doc: Any) -> str | None:
        content = doc.get("content") if isinstance(doc, dict) else None
        return content_text(content) if isinstance(content, list) else None

    def synthetic(self, model: str, stream: bool, prompt: str) -> dict[str, Any]:
        messages = [{"role": "user", "content": prompt}]
        return {"model": model, "stream": stream, "messages": messages, "max_tokens": 1024}

    def sim_ask(self, body: dict[str, Any], headers: dict[str, str]) -> SimAsk:
        if "anthropic-version" not in headers:
            raise BadRequest("anthropic-version: header is required")
        messages, model = body.get("messages"), body.get("model")
        if not isinstance(model, str):
            raise BadRequest("model: Field required", "model")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages: Field required", "messages")
        for m in messages:
            if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
                raise BadRequest("messages: each role must be 'user' or 'assistant'", "messages")
        if int_field(body, "max_tokens") is None:
            raise BadRequest("max_tokens: Field required", "max_tokens")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest("stream: Input should be a valid boolean", "stream")
        max_tokens, min_tokens, ignore_eos = openai_lengths(body, self.budget_fields)
        return SimAsk(
            prompt="".join(self.prompt_parts(body) or []),
            model=model,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=ignore_eos,
            stream=stream,
            include_usage=True,
            thinking=_thinking(body),
            tool=_forced_tool(body),
        )

    def writer(self, answer: SimAnswer) -> ReplyWriter:
        return _MessagesWriter(answer)

    def error_body(self, message: str, kind: str, param: str | None) -> dict[str, Any]:
        kinds = {"rate_limit_error": "rate_limit_error", "invalid_request_error": kind}
        return {
            "type": "error",
            "error": {"type": kinds.get(kind, "api_error"), "message": message},
        }


class _MessagesWriter(ReplyWriter):
    """Blocks in order: thinking (when asked and planned), then text or one tool_use."""

    def __init__(self, answer: SimAnswer) -> None:
        super().__init__(answer)
        self.block = -1
        self.texts: list[str] = []
        self.msg_id = "msg_" + answer.id[-24:]
        self.tool_id = "toolu_" + answer.id[-24:]

    def _event(self, kind: str, **fields: Any) -> bytes:
        return sse(dumps({"type": kind, **fields}), event=kind)

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        a = self.answer
        cached = a.cached_tokens or 0
        return {
            "input_tokens": a.prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": output_tokens,
        }

    def _message(
        self, content: list[Any], stop: str | None, usage: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "id": self.msg_id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": self.model,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    def _stop_reason(self) -> str:
        finish = self.answer.finish
        if finish == "length":
            return "max_tokens"
        return "tool_use" if self.answer.ask.tool is not None else "end_turn"

    def head(self) -> bytes:
        return self._event("message_start", message=self._message([], None, self._usage(1)))

    def _start(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.block += 1
        out += self._event("content_block_start", index=self.block, content_block=block)
        return out + (self._event("ping") if self.block == 0 else b"")

    def _close(self) -> bytes:
        if self.block < 0:
            return b""
        out = b""
        if self.block == 0 and self.answer.reasoning:
            delta = {"type": "signature_delta", "signature": "sim-" + self.msg_id}
            out = self._event("content_block_delta", index=0, delta=delta)
        return out + self._event("content_block_stop", index=self.block)

    def _answer_block(self) -> dict[str, Any]:
        tool = self.answer.ask.tool
        if tool is None:
            return {"type": "text", "text": ""}
        return {"type": "tool_use", "id": self.tool_id, "name": tool, "input": {}}

    def token(self, text: str, index: int) -> bytes:
        a, out = self.answer, b""
        self.texts.append(text)
        if index == 0 and a.reasoning:
            out = self._start({"type": "thinking", "thinking": "", "signature": ""})
        if index == a.reasoning:
            out += self._start(self._answer_block())
        if index < a.reasoning:
            delta = {"type": "thinking_delta", "thinking": text}
        elif a.ask.tool is not None:
            piece = tool_input_piece(a, text, index)
            delta = {"type": "input_json_delta", "partial_json": piece}
        else:
            delta = {"type": "text_delta", "text": text}
        return out + self._event("content_block_delta", index=self.block, delta=delta)

    def tail(self, completion_tokens: int) -> bytes:
        out = self._close()
        delta = {"stop_reason": self._stop_reason(), "stop_sequence": None}
        out += self._event("message_delta", delta=delta, usage={"output_tokens": completion_tokens})
        return out + self._event("message_stop")

    def whole(self, tokens: list[str]) -> dict[str, Any]:
        a = self.answer
        thought, text = "".join(tokens[: a.reasoning]), "".join(tokens[a.reasoning :])
        content: list[Any] = []
        if a.reasoning:
            content.append(
                {"type": "thinking", "thinking": thought, "signature": "sim-" + self.msg_id}
            )
        if a.ask.tool is not None:
            content.append({**self._answer_block(), "input": json.loads(tool_input(text))})
        else:
            content.append({"type": "text", "text": text})
        return self._message(content, self._stop_reason(), self._usage(len(tokens)))
