"""What every API dialect states, and the types that cross from a dialect to a stage.

A dialect (``tailreplay/dialects/<name>.py``) is one ``Dialect`` subclass: its routes,
how to read its requests and answers, how to build a synthetic request, and how the
simulator answers it. The registry (``tailreplay.dialects``) holds one instance of
each; the proxy's tap, the record builder, the replayer's request builder, the
simulator, the spans and the report ask it, never a route list of their own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tailreplay.dialects.usage import Usage

__all__ = [
    "ANSWER",
    "NOT_TOKEN",
    "REASONING",
    "BadRequest",
    "Dialect",
    "ReplyWriter",
    "RequestFields",
    "SimAnswer",
    "SimAsk",
    "int_field",
    "sse",
]

NOT_TOKEN, ANSWER, REASONING = 0, 1, 2
"""What a stream event carries: no generated token, an answer token, a thinking token."""


class BadRequest(ValueError):
    """A request the simulator answers with 400; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(slots=True)
class RequestFields:
    """What a record keeps of a request body, read by its dialect."""

    model: str | None = None
    stream: bool | None = None
    max_tokens: int | None = None
    user: str | None = None
    prompt_parts: list[str] | None = None
    """The prompt's text for counting and prefix hashes, message by message."""
    messages: int = 0
    """Chat messages in the prompt (a chat template wraps each): 0 for a plain prompt."""


@dataclass(frozen=True, slots=True)
class SimAsk:
    """What the simulator needs of a request, read and checked by its dialect."""

    prompt: str
    """The prompt's text as the simulator counts it (the dialect's ``prompt_parts``)."""
    model: str | None
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    """The stream carries usage (OpenAI's chat and completions ask; the rest always do)."""
    thinking: int | None = None
    """A thinking budget the request asked for (Anthropic's ``thinking``), else None."""
    tool: str | None = None
    """A tool the request forces (answered with a call instead of text), else None."""
    options: dict[str, Any] = field(default_factory=dict)
    """Dialect-specific knobs (embeddings' inputs and format)."""


@dataclass(slots=True)
class SimAnswer:
    """One simulated answer, handed to its dialect's ``ReplyWriter``."""

    ask: SimAsk
    id: str
    created: int
    prompt_tokens: int
    cached_tokens: int | None
    finish: str
    """OpenAI's vocabulary: ``stop``, ``length``, ``tool_calls``."""
    reasoning: int
    """The first this many output tokens are thinking."""
    output_tokens: int = 0
    """The tokens the answer is planned to have (a reset fault may cut it short)."""


def tool_input_piece(answer: SimAnswer, text: str, index: int) -> str:
    """Output token ``index`` of a simulated tool call, as the piece of its input's JSON
    it adds: the pieces of a whole answer join into ``tool_input`` of its words, so a
    client that parses the streamed input reads one object."""
    first = '{"text": "' if index == answer.reasoning else ""
    last = '"}' if index == answer.output_tokens - 1 else ""
    return first + json.dumps(text)[1:-1] + last


def tool_input(text: str) -> str:
    """A simulated tool call's whole input: ``{"text": "<the answer's words>"}``."""
    return json.dumps({"text": text})


class ReplyWriter:
    """Writes one simulated answer in a dialect's shapes: whole, or as SSE events.

    The simulator calls ``head`` once before any token, ``token`` for each output token
    in order, and ``tail`` after the last; or ``whole`` with every token's text.
    """

    def __init__(self, answer: SimAnswer) -> None:
        self.answer = answer
        self.model = answer.ask.model or ""

    def head(self) -> bytes:
        return b""

    def token(self, text: str, index: int) -> bytes:
        raise NotImplementedError

    def tail(self, completion_tokens: int) -> bytes:
        raise NotImplementedError

    def whole(self, tokens: list[str]) -> dict[str, Any]:
        raise NotImplementedError


class Dialect:
    """One API dialect: subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    """A short name (``chat``, ``messages``): the registry's key and the docs' word."""
    routes: ClassVar[tuple[str, ...]]
    """Request paths (without query) this dialect serves; the first is the usual one."""
    operation: ClassVar[str]
    """GenAI's ``gen_ai.operation.name``."""
    budget_fields: ClassVar[tuple[str, ...]] = ()
    """The output budget's fields, read in this order; the last (the name servers have
    taken longest: chat's ``max_tokens``) is written when the body names none (a
    synthetic request). Empty: nothing generated."""
    chat_prompt: ClassVar[bool] = False
    """A synthetic prompt goes in as one user message (the simulator counts its role)."""
    stream_ends: ClassVar[tuple[bytes, ...]] = ()
    """Bytes in the data of an event that ends a whole stream (``[DONE]``,
    ``"message_stop"``); empty: the API promises no such event."""
    usage_asked: ClassVar[bool] = False
    """A stream carries usage only when asked (OpenAI's chat and completions)."""
    headers: ClassVar[tuple[tuple[str, str], ...]] = ()
    """Headers the API requires of every request (a replay sends them unless the run
    gives its own)."""
    _finish: ClassVar[re.Pattern[bytes]] = re.compile(rb'"finish_reason"\s*:\s*"([a-z_]+)"')

    @property
    def generates(self) -> bool:
        """Whether answers carry output tokens (embeddings do not)."""
        return bool(self.budget_fields)

    # Reading requests -------------------------------------------------------------

    def read_request(self, body: dict[str, Any]) -> RequestFields:
        """The fields a record keeps of a decoded request body."""
        model, stream, user = body.get("model"), body.get("stream"), body.get("user")
        parts = self.prompt_parts(body)
        return RequestFields(
            model=model if isinstance(model, str) else None,
            # An absent "stream" means False in every dialect here.
            stream=stream if isinstance(stream, bool) else (False if stream is None else None),
            max_tokens=self.budget_of(body),
            user=user if isinstance(user, str) else None,
            prompt_parts=parts,
            messages=self.message_count(body),
        )

    def prompt_parts(self, body: dict[str, Any]) -> list[str] | None:
        """The prompt's text, in parts (a conversation's messages), or None."""
        raise NotImplementedError

    def message_count(self, body: dict[str, Any]) -> int:
        return 0

    def budget_of(self, body: dict[str, Any]) -> int | None:
        """The output budget the body asks for: the first budget field with an int an
        archive holds (0 <= v < 2^32); a client's -1 or 2^40 is no budget."""
        for name in self.budget_fields:
            value = body.get(name)
            if type(value) is int:  # not a bool
                return value if 0 <= value < 1 << 32 else None
        return None

    def set_budget(self, body: dict[str, Any], budget: int) -> None:
        """Write ``budget`` into the field the body already uses, else the last."""
        name = next((n for n in self.budget_fields if n in body), self.budget_fields[-1])
        body[name] = budget

    # Reading answers --------------------------------------------------------------

    def token_kind(self, event: bytes) -> int:
        """What one complete SSE event (its bytes, ``data:`` included) carries."""
        raise NotImplementedError

    def fold_usage(self, usage: Usage, fields: dict[str, Any]) -> None:
        """Set what one ``"usage"`` map reports (OpenAI's names by default)."""
        usage.update(fields)

    def finish_reason(self, text: bytes) -> str | None:
        """The last finish reason in an answer's kept bytes, in OpenAI's words."""
        found = self._finish.findall(text)
        return found[-1].decode() if found else None

    def answer_text(self, doc: Any) -> str | None:
        """The generated text of a whole (not streamed) decoded answer, or None."""
        return None

    # Building requests ------------------------------------------------------------

    def synthetic(self, model: str, stream: bool, prompt: str) -> dict[str, Any]:
        """A request body whose prompt is ``prompt`` (one user turn) and nothing else."""
        raise NotImplementedError

    def ask_usage(self, body: dict[str, Any]) -> bool:
        """Ask, in ``body``, for usage in a stream where the API sends none unasked
        (``stream_options.include_usage``, for ``usage_asked``): the proxy's record and a
        replay's measure then get the server's own counts. Whether ``body`` changed."""
        if not self.usage_asked or body.get("stream") is not True:
            return False
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            return False
        body["stream_options"] = {**(options if isinstance(options, dict) else {})}
        body["stream_options"]["include_usage"] = True
        return True

    # The simulator ----------------------------------------------------------------

    def sim_ask(self, body: dict[str, Any], headers: dict[str, str]) -> SimAsk:
        """The simulator's reading of a request, or BadRequest as the API words it."""
        raise NotImplementedError

    def writer(self, answer: SimAnswer) -> ReplyWriter:
        raise NotImplementedError

    def error_body(self, message: str, kind: str, param: str | None) -> dict[str, Any]:
        """An error answer in the dialect's shape (OpenAI's by default)."""
        return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def int_field(body: dict[str, Any], name: str) -> int | None:
    """An integer field of a request, None when absent; BadRequest when not an int."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'{name}' must be an integer", name)
    return value


def sse(data: bytes, event: str | None = None) -> bytes:
    """One server-sent event: an ``event:`` line when named, the data, a blank line."""
    named = b"event: " + event.encode() + b"\n" if event is not None else b""
    return named + b"data: " + data + b"\n\n"
