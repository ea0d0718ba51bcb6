"""Chat-completion request bodies for the recorder's benchmarks, every one distinct.

Two workloads, both about 4 KB a request on average and cut from prose nobody
wrote for them (the GPL as Debian installs it):

- **chats**: multi-turn conversations as a chat client sends them. Each request
  carries one of 8 system prompts (about 1.2 KB), the conversation's earlier turns
  unchanged, and a new turn: the assistant's last reply and the user's next
  message (about 1 KB together), numbered with the request so that no two
  requests' new turns are alike. The new turn is a quarter of the bytes; what a
  memo of earlier messages saves is the rest, as in real chat traffic.
- **prompts**: one 4 KB user message per request, numbered; nothing repeats.

``bodies(kind, n)`` gives them in Python; ``wrk_script(kind, path)`` writes a wrk
script that builds the same bodies, request by request (wrk's two threads number
theirs apart).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

LICENCE = Path("/usr/share/common-licenses/GPL-3")
SYSTEM_PROMPTS = 8
CONVERSATIONS = 64
TURNS = 6
SYSTEM_CHARS = 1200
USER_CHARS = 300
REPLY_CHARS = 700
PROMPT_CHARS = 4000


class _Prose:
    """Successive slices of the licence text, wrapping around."""

    def __init__(self) -> None:
        self.text = " ".join(LICENCE.read_text().split())
        self.pos = 0

    def take(self, n: int) -> str:
        if self.pos + n > len(self.text):
            self.pos = (self.pos + 7919) % 1000  # start again, elsewhere
        piece = self.text[self.pos : self.pos + n]
        self.pos += n
        return piece


def _message(role: str, content: str) -> str:
    return json.dumps({"role": role, "content": content})


def _parts() -> tuple[list[str], list[list[tuple[str, str]]]]:
    """The system prompts' messages, and each conversation's turns as (user, reply)."""
    prose = _Prose()
    systems = [_message("system", prose.take(SYSTEM_CHARS)) for _ in range(SYSTEM_PROMPTS)]
    turns = [
        [(prose.take(USER_CHARS), prose.take(REPLY_CHARS)) for _ in range(TURNS)]
        for _ in range(CONVERSATIONS)
    ]
    return systems, turns


def _prompts() -> list[str]:
    prose = _Prose()
    return [prose.take(PROMPT_CHARS) for _ in range(256)]


_HEAD = '{"model":"m","max_tokens":16,"messages":['
_TAIL = "]}"


def bodies(kind: str, n: int, start: int = 0) -> Iterator[bytes]:
    """``n`` request bodies of workload ``kind`` ("chats" or "prompts")."""
    if kind == "prompts":
        texts = _prompts()
        for i in range(start, start + n):
            content = f"({i}) {texts[i % len(texts)]}"
            yield (_HEAD + _message("user", content) + _TAIL).encode()
        return
    systems, turns = _parts()
    for i in range(start, start + n):
        yield (_HEAD + ",".join(_chat(i, systems, turns)) + _TAIL).encode()


def _chat(i: int, systems: list[str], turns: list[list[tuple[str, str]]]) -> list[str]:
    """Request ``i``'s messages: turn t of conversation c, its earlier turns as they
    were, the reply the user answers (new in this request) and the user's message,
    both numbered."""
    c, t = i % CONVERSATIONS, (i // CONVERSATIONS) % TURNS
    messages = [systems[c % SYSTEM_PROMPTS]]
    for k, (user, reply) in enumerate(turns[c][:t]):
        messages.append(_message("user", user))
        messages.append(_message("assistant", reply if k < t - 1 else f"({i}) {reply}"))
    messages.append(_message("user", f"({i}) {turns[c][t][0]}"))
    return messages


def _lua(text: str) -> str:
    """``text`` as a Lua long string."""
    assert "]==]" not in text
    return f"[==[{text}]==]"


def _escaped(text: str) -> str:
    """``text`` as it sits between a JSON string's quotes."""
    return json.dumps(text)[1:-1]


def wrk_script(kind: str, path: Path) -> Path:
    """A wrk script at ``path`` that posts ``bodies(kind, …)``'s bodies, numbered from
    0 in thread 1 and from 1 in thread 2, two apart (for ``wrk -t2``)."""
    head = f"""wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local threads = 0
function setup(thread) thread:set("first", threads); threads = threads + 1 end
local n = 0
local head, tail = {_lua(_HEAD)}, {_lua(_TAIL)}
"""
    if kind == "prompts":
        texts = [_escaped(t) for t in _prompts()]
        body = f"""local texts = {{{", ".join(map(_lua, texts))}}}
function request()
  local i = n * 2 + first
  n = n + 1
  local content = "(" .. i .. ") " .. texts[i % {len(texts)} + 1]
  local message = '{{"role": "user", "content": "' .. content .. '"}}'
  return wrk.format(nil, nil, nil, head .. message .. tail)
end
"""
        path.write_text(head + body)
        return path
    systems, turns = _parts()
    convs = ", ".join(
        "{" + ", ".join(f"{{{_lua(_escaped(u))}, {_lua(_escaped(r))}}}" for u, r in conv) + "}"
        for conv in turns
    )
    body = f"""local systems = {{{", ".join(map(_lua, systems))}}}
local turns = {{{convs}}}
local function message(role, content)
  return '{{"role": "' .. role .. '", "content": "' .. content .. '"}}'
end
function request()
  local i = n * 2 + first
  n = n + 1
  local c, t = i % {CONVERSATIONS}, math.floor(i / {CONVERSATIONS}) % {TURNS}
  local parts = {{systems[c % {SYSTEM_PROMPTS} + 1]}}
  for k = 0, t - 1 do
    local user, reply = turns[c + 1][k + 1][1], turns[c + 1][k + 1][2]
    parts[#parts + 1] = message("user", user)
    if k == t - 1 then reply = "(" .. i .. ") " .. reply end
    parts[#parts + 1] = message("assistant", reply)
  end
  parts[#parts + 1] = message("user", "(" .. i .. ") " .. turns[c + 1][t + 1][1])
  return wrk.format(nil, nil, nil, head .. table.concat(parts, ",") .. tail)
end
"""
    path.write_text(head + body)
    return path
