"""OpenAI embeddings (``/v1/embeddings``): text in, vectors out, nothing generated.

Usage reports ``prompt_tokens`` (and ``total_tokens``) only: a record's output tokens
are 0. The official SDK asks for ``encoding_format: "base64"`` (little-endian float32)
unless told otherwise; both formats are answered.
"""

from __future__ import annotations

import base64
import hashlib
from array import array
from typing import Any

from tailreplay.dialects.base import BadRequest, Dialect, ReplyWriter, SimAnswer, SimAsk
from tailreplay.dialects.usage import Usage, count

__all__ = ["Embeddings"]

DIMENSIONS = 16
"""The simulator's vectors, unless the request asks for ``dimensions``."""
MAX_INPUTS = 2048
"""Inputs one request may carry (OpenAI's limit): the answer's size is bounded."""


def _texts(given: Any) -> list[str] | None:
    """The inputs as text: a string, a list of strings; token arrays as their ids."""
    if isinstance(given, str):
        return [given]
    if isinstance(given, list) and given and all(isinstance(t, str) for t in given):
        return list(given)
    return None


class Embeddings(Dialect):
    name = "embeddings"
    routes = ("/v1/embeddings",)
    operation = "embeddings"

    def prompt_parts(self, body: dict[str, Any]) -> list[str] | None:
        return _texts(body.get("input"))

    def token_kind(self, event: bytes) -> int:
        return 0  # never streamed

    def fold_usage(self, usage: Usage, fields: dict[str, Any]) -> None:
        if (given := count(fields.get("prompt_tokens"))) is not None:
            usage.prompt_tokens = given
            usage.completion_tokens = 0

    def finish_reason(self, text: bytes) -> str | None:
        return None

    def synthetic(self, model: str, stream: bool, prompt: str) -> dict[str, Any]:
        return {"model": model, "input": prompt, "encoding_format": "float"}

    def sim_ask(self, body: dict[str, Any], headers: dict[str, str]) -> SimAsk:
        texts = _texts(body.get("input"))
        if texts is None:
            raise BadRequest("'input' must be a string or an array of strings", "input")
        if len(texts) > MAX_INPUTS:
            raise BadRequest(f"'input' must have at most {MAX_INPUTS} items", "input")
        model, fmt = body.get("model"), body.get("encoding_format", "float")
        if not isinstance(model, str):
            raise BadRequest("'model' is required and must be a string", "model")
        if fmt not in ("float", "base64"):
            raise BadRequest("'encoding_format' must be 'float' or 'base64'", "encoding_format")
        size = body.get("dimensions", DIMENSIONS)
        if type(size) is not int or not 1 <= size <= 4096:
            raise BadRequest("'dimensions' must be an integer from 1 to 4096", "dimensions")
        options = {"inputs": texts, "format": fmt, "dimensions": size}
        return SimAsk("".join(texts), model, 1, 0, True, False, False, options=options)

    def writer(self, answer: SimAnswer) -> ReplyWriter:
        return _VectorsWriter(answer)


def _vector(text: str, size: int) -> list[float]:
    """A deterministic unit-free vector of ``size`` floats drawn from the text's hash."""
    seed = hashlib.shake_128(text.encode("utf-8", "surrogatepass")).digest(size)
    return [round(b / 255 - 0.5, 4) for b in seed]


class _VectorsWriter(ReplyWriter):
    def whole(self, tokens: list[str]) -> dict[str, Any]:
        a = self.answer
        size, fmt = a.ask.options["dimensions"], a.ask.options["format"]
        data = []
        for i, text in enumerate(a.ask.options["inputs"]):
            vector: Any = _vector(text, size)
            if fmt == "base64":
                vector = base64.b64encode(array("f", vector).tobytes()).decode()
            data.append({"object": "embedding", "index": i, "embedding": vector})
        usage = {"prompt_tokens": a.prompt_tokens, "total_tokens": a.prompt_tokens}
        return {"object": "list", "data": data, "model": self.model, "usage": usage}
