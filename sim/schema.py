"""The requests the simulator accepts, in every dialect, and the errors it returns.

Each dialect reads and checks its own request (``Dialect.sim_ask``); sampling
parameters (temperature, top_p, seed, stop, ...) are accepted and ignored: they
change what a model says, not how long the server takes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tailreplay.dialects import Dialect
from tailreplay.dialects.base import BadRequest, SimAsk
from tailreplay.dialects.prompt_text import chat_text

__all__ = ["BadRequest", "SimRequest", "error_body", "parse_request", "render_chat"]


@dataclass(frozen=True, slots=True)
class SimRequest:
    kind: str
    """The dialect's name (``chat``, ``completions``, ``responses``, ...)."""
    ask: SimAsk
    digest: bytes
    """A hash of what determines the answer: equal requests get equal answers."""

    @property
    def model(self) -> str | None:
        return self.ask.model

    @property
    def prompt(self) -> str:
        return self.ask.prompt

    @property
    def max_tokens(self) -> int | None:
        return self.ask.max_tokens

    @property
    def min_tokens(self) -> int:
        return self.ask.min_tokens

    @property
    def ignore_eos(self) -> bool:
        return self.ask.ignore_eos

    @property
    def stream(self) -> bool:
        return self.ask.stream


def error_body(
    message: str, param: str | None = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def render_chat(messages: list[dict[str, Any]]) -> str:
    """The prompt text of a chat request (``tailreplay.dialects.prompt_text.chat_text``)."""
    return chat_text(messages)


def parse_request(raw: bytes, dialect: Dialect, headers: dict[str, str]) -> SimRequest:
    """The request ``raw`` in ``dialect``, or BadRequest (``headers``: lower-case names)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    ask = dialect.sim_ask(body, headers)
    # "completion": the word the digest has always had for text completions, so a seed
    # gives the answers it gave before every dialect was served.
    named = "completion" if dialect.name == "completions" else dialect.name
    digest = hashlib.blake2b(
        json.dumps(
            [named, ask.prompt, ask.model, ask.max_tokens, ask.min_tokens, ask.ignore_eos]
        ).encode(),
        digest_size=16,
    ).digest()
    return SimRequest(kind=dialect.name, ask=ask, digest=digest)
