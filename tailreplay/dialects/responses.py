"""OpenAI's Responses API (``/v1/responses``): input items in, output items out.

A stream is a sequence of typed events (``response.created``, ``output_item.added``,
``content_part.added``, ``output_text.delta`` …, ``output_text.done``,
``content_part.done``, ``output_item.done``, ``response.completed``). Only the
``*.delta`` events carry generated tokens (text, refusals, function-call arguments,
reasoning); the ``*.done`` events repeat the whole text and are not tokens. Usage
(``input_tokens``, ``output_tokens`` and their details) comes in ``response.completed``.
"""

from __future__ import annotations

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
    sse,
    tool_input,
    tool_input_piece,
)
from tailreplay.dialects.chat import dumps, openai_lengths
from tailreplay.dialects.prompt_text import chat_parts, content_text

__all__ = ["Responses"]

_TYPE = re.compile(rb'"type"\s*:\s*"response\.([a-z_.]+)"')
_FILLED = re.compile(rb'"delta"\s*:\s*"(?!")')
_LENGTH = re.compile(rb'"incomplete_details"\s*:\s*\{\s*"reason"\s*:\s*"max_output_tokens"')
_CALL = re.compile(rb'"type"\s*:\s*"function_call"')
_COMPLETED = re.compile(rb'"status"\s*:\s*"completed"')


def _input_parts(items: list[Any]) -> list[str]:
    """Input items as text: messages as chat messages, a tool's output as its text."""
    parts = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if "role" in item:
            parts.extend(chat_parts([item]))
        elif isinstance(item.get("output"), str):  # function_call_output
            parts.append(item["output"])
    return parts


def _forced_tool(body: dict[str, Any]) -> str | None:
    tools, choice = body.get("tools"), body.get("tool_choice")
    if not isinstance(tools, list) or not tools:
        return None
    if isinstance(choice, dict) and isinstance(choice.get("name"), str):
        return str(choice["name"])
    if choice == "required":
        name = tools[0].get("name") if isinstance(tools[0], dict) else None
        return name if isinstance(name, str) else "tool"
    return None


class Responses(Dialect):
    name = "responses"
    routes = ("/v1/responses",)
    operation = "chat"
    budget_fields = ("max_output_tokens",)
    stream_ends = (b'"response.completed"', b'"response.incomplete"', b'"response.failed"')

    def prompt_parts(self, body: dict[str, Any]) -> list[str] | None:
        given, instructions = body.get("input"), body.get("instructions")
        head = [f"system\n{instructions}\n"] if isinstance(instructions, str) else []
        if isinstance(given, str):
            return [*head, given]
        if isinstance(given, list):
            return [*head, *_input_parts(given)]
        return None

    def message_count(self, body: dict[str, Any]) -> int:
        given = body.get("input")
        return len(given) if isinstance(given, list) else 0

    def token_kind(self, event: bytes) -> int:
        m = _TYPE.search(event)
        if m is None or not m.group(1).endswith(b".delta") or m.group(1) == b"audio.delta":
            return NOT_TOKEN
        if _FILLED.search(event) is None:
            return NOT_TOKEN  # an empty delta carries no token
        return REASONING if b"reasoning" in m.group(1) else ANSWER

    def finish_reason(self, text: bytes) -> str | None:
        if _LENGTH.search(text):
            return "length"
        if _CALL.search(text):
            return "tool_calls"
        return "stop" if _COMPLETED.search(text) else None

    def answer_text(self, doc: Any) -> str | None:
        output = doc.get("output") if isinstance(doc, dict) else None
        if not isinstance(output, list):
            return None
        texts = [
            content_text(item.get("content"))
            for item in output
            if isinstance(item, dict) and item.get("type") == "message"
        ]
        return "".join(texts)

    def synthetic(self, model: str, stream: bool, prompt: str) -> dict[str, Any]:
        return {"model": model, "stream": stream, "input": prompt}

    def sim_ask(self, body: dict[str, Any], headers: dict[str, str]) -> SimAsk:
        given = body.get("input")
        if not isinstance(given, str | list) or not given:
            raise BadRequest("'input' must be a non-empty string or array", "input")
        model, stream = body.get("model"), body.get("stream", False)
        if not isinstance(model, str):
            raise BadRequest("'model' is required and must be a string", "model")
        if not isinstance(stream, bool):
            raise BadRequest("'stream' must be a boolean", "stream")
        max_tokens, min_tokens, ignore_eos = openai_lengths(body, self.budget_fields)
        parts = self.prompt_parts(body) or []
        return SimAsk(
            prompt="".join(parts),
            model=model,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=ignore_eos,
            stream=stream,
            include_usage=True,
            tool=_forced_tool(body),
            options={"max_output_tokens": max_tokens},
        )

    def writer(self, answer: SimAnswer) -> ReplyWriter:
        return _ResponsesWriter(answer)


class _ResponsesWriter(ReplyWriter):
    """The documented event sequence; items: an optional reasoning item, then a message
    (or a function call when a tool is forced)."""

    def __init__(self, answer: SimAnswer) -> None:
        super().__init__(answer)
        self.seq = 0
        self.texts: list[str] = []
        hexid = answer.id[-24:]
        self.ids = {"reasoning": "rs_" + hexid, "message": "msg_" + hexid, "call": "fc_" + hexid}
        self.call_id = "call_" + hexid

    def _event(self, kind: str, **fields: Any) -> bytes:
        body = {"type": f"response.{kind}", "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(dumps(body), event=f"response.{kind}")

    def _response(self, status: str, output: list[Any], usage: Any) -> dict[str, Any]:
        a = self.answer
        length = a.finish == "length"
        return {
            "id": "resp_" + a.id[-24:],
            "object": "response",
            "created_at": a.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if length and usage else None,
            "instructions": None,
            "max_output_tokens": a.ask.options.get("max_output_tokens"),
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        }

    def _usage(self, completion_tokens: int) -> dict[str, Any]:
        a = self.answer
        return {
            "input_tokens": a.prompt_tokens,
            "input_tokens_details": {"cached_tokens": a.cached_tokens or 0},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": min(a.reasoning, completion_tokens)},
            "total_tokens": a.prompt_tokens + completion_tokens,
        }

    def _items(self, thought: str | None, text: str | None) -> list[dict[str, Any]]:
        """The output items, whole, for the texts given (None: not begun)."""
        a, items = self.answer, []
        if a.reasoning:
            content = [{"type": "reasoning_text", "text": thought or ""}]
            items.append(
                {
                    "type": "reasoning",
                    "id": self.ids["reasoning"],
                    "summary": [],
                    "content": content,
                }
            )
        if text is None:
            return items
        if a.ask.tool is not None:
            call = {
                "type": "function_call",
                "id": self.ids["call"],
                "call_id": self.call_id,
            }
            items.append({**call, "name": a.ask.tool, "arguments": text, "status": "completed"})
        else:
            part = {"type": "output_text", "text": text, "annotations": []}
            items.append(
                {
                    "type": "message",
                    "id": self.ids["message"],
                    "status": "completed",
                    "role": "assistant",
                    "content": [part],
                }
            )
        return items

    def head(self) -> bytes:
        begun = self._response("in_progress", [], None)
        out = self._event("created", response=begun) + self._event("in_progress", response=begun)
        if self.answer.reasoning:
            item = {"type": "reasoning", "id": self.ids["reasoning"], "summary": [], "content": []}
            out += self._event("output_item.added", output_index=0, item=item)
        return out

    def _open_answer(self) -> bytes:
        """The answer's item (and its text part) opened, after any reasoning closed."""
        a, out = self.answer, b""
        index = 1 if a.reasoning else 0
        if a.reasoning:
            thought = "".join(self.texts)
            rid = self.ids["reasoning"]
            out += self._event(
                "reasoning_text.done", item_id=rid, output_index=0, content_index=0, text=thought
            )
            out += self._event(
                "output_item.done", output_index=0, item=self._items(thought, None)[0]
            )
        if a.ask.tool is not None:
            call = {"type": "function_call", "id": self.ids["call"], "call_id": self.call_id}
            call.update(name=a.ask.tool, arguments="", status="in_progress")
            return out + self._event("output_item.added", output_index=index, item=call)
        item: dict[str, Any] = {"type": "message", "id": self.ids["message"]}
        item.update(status="in_progress", role="assistant", content=[])
        part = {"type": "output_text", "text": "", "annotations": []}
        out += self._event("output_item.added", output_index=index, item=item)
        return out + self._event(
            "content_part.added",
            item_id=self.ids["message"],
            output_index=index,
            content_index=0,
            part=part,
        )

    def token(self, text: str, index: int) -> bytes:
        a, out = self.answer, b""
        if index == a.reasoning:
            out = self._open_answer()
        if a.ask.tool is not None and index >= a.reasoning:
            text = tool_input_piece(a, text, index)  # the arguments' JSON, piece by piece
        self.texts.append(text)
        if index < a.reasoning:
            rid = self.ids["reasoning"]
            fields = {"item_id": rid, "output_index": 0, "content_index": 0, "delta": text}
            return out + self._event("reasoning_text.delta", **fields)
        at = 1 if a.reasoning else 0
        if a.ask.tool is not None:
            fields = {"item_id": self.ids["call"], "output_index": at, "delta": text}
            return out + self._event("function_call_arguments.delta", **fields)
        fields = {"item_id": self.ids["message"], "output_index": at, "content_index": 0}
        return out + self._event("output_text.delta", **fields, delta=text, logprobs=[])

    def tail(self, completion_tokens: int) -> bytes:
        a = self.answer
        thought = "".join(self.texts[: a.reasoning])
        text = "".join(self.texts[a.reasoning :])
        at = 1 if a.reasoning else 0
        out = self._open_answer() if len(self.texts) <= a.reasoning else b""
        if a.ask.tool is not None:
            done = {"item_id": self.ids["call"], "output_index": at, "arguments": text}
            out += self._event("function_call_arguments.done", **done)
        else:
            mid = self.ids["message"]
            out += self._event(
                "output_text.done", item_id=mid, output_index=at, content_index=0, text=text
            )
            part = {"type": "output_text", "text": text, "annotations": []}
            out += self._event(
                "content_part.done", item_id=mid, output_index=at, content_index=0, part=part
            )
        items = self._items(thought, text)
        out += self._event("output_item.done", output_index=at, item=items[-1])
        status = "incomplete" if a.finish == "length" else "completed"
        final = self._response(status, items, self._usage(completion_tokens))
        return out + self._event(status, response=final)

    def whole(self, tokens: list[str]) -> dict[str, Any]:
        a = self.answer
        thought, text = "".join(tokens[: a.reasoning]), "".join(tokens[a.reasoning :])
        if a.ask.tool is not None:
            text = tool_input(text)
        status = "incomplete" if a.finish == "length" else "completed"
        return self._response(status, self._items(thought, text), self._usage(len(tokens)))
