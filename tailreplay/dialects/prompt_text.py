"""A prompt's text as tailreplay counts it, whatever the dialect wrapped it in.

A stand-in for a chat template (which adds a few tokens per message the same way):
each message as ``<role>\\n<content>\\n``. The proxy tokenises it for prefix hashes
and estimates, the simulator counts prompts with it, and the replayer sizes
synthetic prompts by it, so the three agree on every dialect.
"""

from __future__ import annotations

from typing import Any

__all__ = ["chat_parts", "chat_text", "content_text"]


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts (OpenAI's
    ``{"type": "text", "text": ...}`` and ``input_text``, Anthropic's text blocks and
    the text inside a ``tool_result``); images and other parts count nothing."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    out = []
    for part in content:
        if not isinstance(part, dict):
            continue
        text = part.get("text")
        if isinstance(text, str):
            out.append(text)
        elif part.get("type") == "tool_result":
            out.append(content_text(part.get("content")))
    return "".join(out)


def chat_parts(messages: list[Any]) -> list[str]:
    """Each message as ``<role>\\n<content>\\n`` (a conversation's earlier messages come
    again, unchanged, in each of its requests)."""
    return [
        f"{m.get('role', '')}\n{content_text(m.get('content'))}\n"
        for m in messages
        if isinstance(m, dict)
    ]


def chat_text(messages: list[Any]) -> str:
    """``chat_parts`` joined: the whole prompt of a chat.

    >>> chat_text([{"role": "user", "content": "hi"}])
    'user\\nhi\\n'
    """
    return "".join(chat_parts(messages))
