"""The OpenAI request schema the simulator accepts, and the errors it returns.

Sampling parameters (temperature, top_p, seed, stop, ...) are accepted and
ignored: they change what a model says, not how long the server takes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tailreplay.openai_api import chat_text

__all__ = ["BadRequest", "SimRequest", "error_body", "parse_request", "render_chat"]


class BadRequest(ValueError):
    """A request the server answers with 400; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class SimRequest:
    kind: str
    """``chat`` or ``completion``."""
    model: str | None
    prompt: str
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    digest: bytes
    """A hash of what determines the answer: equal requests get equal answers."""


def error_body(
    message: str, param: str | None = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def render_chat(messages: list[dict[str, Any]]) -> str:
    """The prompt text of a chat request (see ``tailreplay.traces.text.tokens.chat_text``)."""
    return chat_text(messages)


def _int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'{name}' must be an integer", name)
    return value


def parse_request(raw: bytes, kind: str) -> SimRequest:
    """The request ``raw`` (a chat or text completion, by ``kind``), or BadRequest."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    prompt = _chat_prompt(body) if kind == "chat" else _text_prompt(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string", "model")
    max_tokens, min_tokens = _lengths(body)
    if _int(body, "n") not in (None, 1):
        raise BadRequest("only n=1 is supported", "n")
    stream = body.get("stream", False)
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(stream, bool) or not isinstance(ignore_eos, bool):
        raise BadRequest("'stream' and 'ignore_eos' must be booleans")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    digest = hashlib.blake2b(
        json.dumps([kind, prompt, model, max_tokens, min_tokens, ignore_eos]).encode(),
        digest_size=16,
    ).digest()
    return SimRequest(
        kind=kind,
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=ignore_eos,
        stream=stream,
        include_usage=bool(options and options.get("include_usage")),
        digest=digest,
    )


def _chat_prompt(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", "messages")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("each message must be an object with a 'role'", "messages")
        if not isinstance(m.get("content"), str | list | None):
            raise BadRequest("message 'content' must be a string or an array", "messages")
    return render_chat(messages)


def _text_prompt(body: dict[str, Any]) -> str:
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if not isinstance(p, str):
        raise BadRequest("'prompt' must be a string", "prompt")
    return p


def _lengths(body: dict[str, Any]) -> tuple[int | None, int]:
    """(max_tokens, min_tokens): the output budget asked for, checked for consistency."""
    max_tokens = _int(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens")
    if max_tokens is not None and max_tokens <= 0:
        raise BadRequest("'max_tokens' must be at least 1", "max_tokens")
    min_tokens = _int(body, "min_tokens") or 0
    if min_tokens < 0:
        raise BadRequest("'min_tokens' must not be negative", "min_tokens")
    if max_tokens is not None and min_tokens > max_tokens:
        raise BadRequest("'min_tokens' must not exceed 'max_tokens'", "min_tokens")
    return max_tokens, min_tokens
