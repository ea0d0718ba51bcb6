"""What the recorder remembers between requests changes no record: redaction and
token counts with the memos (traces/text/memo.py) are those without them, and the
memos stay within their size."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailreplay.dialects.prompt_text import chat_parts, chat_text
from tailreplay.traces.text import redact_json
from tailreplay.traces.text.memo import SizedMemo
from tailreplay.traces.text.redact_bodies import redact_body
from tailreplay.traces.text.tokens import encode_parts, get
from tests.secret_corpus import benign, credentials

KEY = b"k" * 32


def test_the_memo_drops_the_least_recently_used_to_stay_within_its_size() -> None:
    memo: SizedMemo[str] = SizedMemo(capacity=100)
    for name in "abcde":
        memo.put(name, name.upper(), 20)
    assert memo.get("a") == "A"  # now b is the least recently used
    memo.put("f", "F", 20)
    assert [memo.get(n) for n in "abcdef"] == ["A", None, "C", "D", "E", "F"]
    assert memo.size == 100
    memo.put("huge", "H", 26)  # over a quarter of the capacity: never kept
    assert memo.get("huge") is None and memo.size == 100


def test_the_redaction_memo_stays_within_its_size() -> None:
    rng = random.Random(3)
    for i in range(120):  # 120 distinct 100 KB bodies: 12 M characters seen
        text = "".join(rng.choice("abcdef ghij\n") for _ in range(100_000))
        redact_body(json.dumps({"messages": [{"content": f"{i} {text}"}]}).encode(), KEY)
    assert redact_json.STRINGS.size <= redact_json.STRINGS.capacity


_ROLES = st.sampled_from(["user", "assistant", "system", "tool", "", " user", "\nx", "1", "é"])
_CONTENT = st.one_of(
    st.text(max_size=60),
    st.lists(st.sampled_from([" ", "\n", "\r\n", "  \n", "word", "42", "!", "'s", "é"])).map(
        "".join
    ),
)


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(st.fixed_dictionaries({"role": _ROLES, "content": _CONTENT}), max_size=8))
def test_tokens_message_by_message_are_the_whole_prompts(messages: list[dict[str, str]]) -> None:
    memo: SizedMemo[list[int]] = SizedMemo(capacity=1 << 16)
    whole = get().encode_ordinary(chat_text(messages))
    assert encode_parts(chat_parts(messages), memo) == whole
    assert encode_parts(chat_parts(messages), memo) == whole  # again, from the memo


def _bodies() -> list[str]:
    """Chat bodies with each corpus value placed where redaction must find it: in a
    message, as a member's name and value, in a name/value pair, in a tool call's
    arguments, and behind a duplicate member name."""
    values = [secret for _, secret, _ in credentials()]
    values += [v for vs in benign().values() for v in vs]
    out = []
    for v in values:
        out += [
            json.dumps({"messages": [{"role": "user", "content": f"use {v} now"}]}),
            json.dumps({"messages": [], "metadata": {v: 1, "api_key": v}}),
            json.dumps({"env": [{"name": "OPENAI_API_KEY", "value": v}], "x": f"a {v}"}),
            json.dumps({"tool_calls": [{"arguments": json.dumps({"token": v, "q": v})}]}),
            '{"content": ' + json.dumps(v) + ', "content": "hi"}',
        ]
    return out


def test_a_body_kept_whole_is_one_the_walk_would_not_change() -> None:
    # The shortcut (nothing in the parsed document to mask: keep the text) against
    # the walk through every literal, on every placement of every corpus value.
    for text in _bodies():
        doc = json.loads(text)
        walked = redact_json._JsonRedactor(KEY, 0, redact_json.pair_secrets(doc)).run(text)
        assert redact_json.redact_json(text, KEY) == walked, text


def test_a_duplicate_member_name_hides_no_credential() -> None:
    # json.loads keeps the last of two members of one name: the first is only in the text.
    secret = "sk-proj-" + "Ab3dE" * 9
    body = ('{"content": "' + secret + '", "content": "hello"}').encode()
    assert secret.encode() not in redact_body(body, KEY)


def test_remembered_redactions_keep_each_keys_fingerprints() -> None:
    secret = "ghp_" + "a1B2c3D4e5" * 4
    body = json.dumps({"messages": [{"content": f"my token {secret} " + "x" * 200}]}).encode()
    first = redact_body(body, KEY)
    assert redact_body(body, KEY) == first
    other = redact_body(body, b"o" * 32)
    assert other != first and secret.encode() not in other


PASSWORD = "Tr0ub4dor&3horse"


def test_a_pair_hides_no_credential_behind_a_repeated_member_or_a_list() -> None:
    for body in (
        b'{"name":"OPENAI_API_KEY","value":"Tr0ub4dor&3horse","value":""}',
        b'{"name":"OPENAI_API_KEY","name":"x","value":"Tr0ub4dor&3horse"}',
        b'{"name":"DB_PASSWORD","value":["Tr0ub4dor&3horse"]}',
        b'{"name":"DB_PASSWORD","value":{"v":"Tr0ub4dor&3horse"}}',
        b'{"properties":{"password":"Tr0ub4dor&3horse"}}',  # a value, not a schema
    ):
        assert PASSWORD.encode() not in redact_body(body, KEY), body


def test_a_pairs_secret_is_masked_in_json_nested_in_a_string() -> None:
    # Escaped otherwise in the nested document (`\/`): found once that is parsed.
    body = json.dumps(
        {
            "env": [{"name": "DB_PASSWORD", "value": "p@ss/w0rd-xyz"}],
            "args": '{"cmd":"p@ss\\/w0rd-xyz"}',
        }
    ).encode()
    args = json.loads(json.loads(redact_body(body, KEY))["args"])
    assert "w0rd" not in args["cmd"]


def test_a_large_string_nested_in_strings_is_redacted_once_per_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Strings too large for the memo skip the shortcut: a shortcut abandoned after
    # redacting them would redact them again at every level of nesting.
    big = "lorem ipsum dolor " * 66_000  # 1.2 M characters: over a quarter of the memo
    inner = json.dumps({"b": "mail bob@example.com", "a": big})
    for _ in range(4):
        inner = json.dumps({"b": "mail bob@example.com", "a": inner})
    calls = 0
    redact_text = redact_json.redact_text

    def counted(text: str, key: bytes) -> str:
        nonlocal calls
        calls += len(text) >= len(big)
        return redact_text(text, key)

    monkeypatch.setattr(redact_json, "redact_text", counted)
    out = redact_body(inner.encode(), KEY)
    assert b"bob@example.com" not in out
    assert calls == 1  # the big text once, at the level where it is text
