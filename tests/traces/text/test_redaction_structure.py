"""Structure, not punctuation: a value in text runs past ``&`` unless a parameter
follows, and name/value pairs written as lists or tuples are judged by their name."""

from __future__ import annotations

import json

import pytest

from tailreplay.traces.text.redact import redact_text
from tailreplay.traces.text.redact_bodies import redact_body, redact_value

KEY = b"k" * 32
SECRET = "Zq81kjXmv2abcdef"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("my login: password=Tr0ub4dor&WC5IdXYpEH thanks", " thanks"),
        ("GET /x?api_key=abc123xyz&format=json", "&format=json"),
        (f'headers = [("Authorization", "{SECRET}")]', '")]'),
        (f"env = [['DB_PASSWORD', '{SECRET}'], ['LANG', 'C']]", "['LANG', 'C']"),
    ],
)
def test_the_whole_value_is_masked_and_what_follows_kept(text: str, kept: str) -> None:
    out = redact_text(text, KEY)
    assert "[SECRET:fp:" in out and kept in out, out
    assert "WC5IdXYpEH" not in out and SECRET not in out and "abc123xyz" not in out


@pytest.mark.parametrize(
    "text",
    [
        "lambda name: name in ('SIG_DFL', 'SIG_IGN')",
        "'APPEND': ('AUTH', 'SELECTED'),",
        'pairs ["Accept", "json"], ok',
        'f(x, ("token", value))',
    ],
)
def test_pairs_of_no_credential_stay(text: str) -> None:
    assert redact_text(text, KEY) == text


def test_a_header_list_in_a_json_body_is_masked_by_its_names() -> None:
    doc = {"headers": [["X-Api-Token", SECRET], ["Accept", "json"]]}
    body = redact_body(json.dumps(doc).encode(), KEY).decode()
    assert SECRET not in body and '["Accept", "json"]' in body
    nested = {"messages": [{"role": "user", "content": json.dumps(doc)}]}
    assert SECRET not in redact_body(json.dumps(nested).encode(), KEY).decode()
    assert SECRET not in json.dumps(redact_value(doc, KEY))
