"""Credentials inside encoded runs of text (percent-encoding, base64, ``\\u`` escapes,
quoted-printable) are masked where they occur; encoded text without one is left as
it came."""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest

from tailreplay.traces.text.redact import redact_text
from tailreplay.traces.text.redact_bodies import redact_body

KEY = b"k" * 32
OPENAI = "sk-proj-Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY"
PEM = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
    "Zq81kjXmv2abcdefghijklmnopqrstuvwxyz1234567890ABCDEFGH\n-----END PRIVATE KEY-----"
)
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
DSN = "postgres://app:Zq81kjXmv2@db.internal/x"
ACCOUNT_KEY = "Zq81kjXmv2abcdefghijklmnopqrstuvwxyz12345=="
IMAGE = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPh"
    "fDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("callback ?next=" + quote(DSN, safe=""), "Zq81kjXmv2"),
        ("key=" + quote(PEM, safe=""), PEM_BODY),
        ("conn: AccountKey%3D" + quote(ACCOUNT_KEY, safe=""), ACCOUNT_KEY[:20]),
        ("kind: Secret\ndata:\n  x: " + base64.b64encode(OPENAI.encode()).decode(), OPENAI),
        ("env: " + base64.b64encode(b"DB_PASSWORD=Zq81kjXmv2").decode(), "Zq81kjXmv2"),
        ("log: " + OPENAI.replace("-", "\\u002d"), OPENAI[8:]),
        ("escaped: " + PEM.replace("-", "\\u002d"), PEM_BODY),
        ("Content-Transfer-Encoding: quoted-printable\npassword=3DZq81kjXmv2", "Zq81kjXmv2"),
    ],
    ids=["percent_url", "percent_pem", "percent_account_key", "base64_key", "base64_assignment",
         "u_escaped_key", "u_escaped_pem", "quoted_printable"],
)  # fmt: skip
def test_an_encoded_credential_is_masked(text: str, secret: str) -> None:
    out = redact_text(text, KEY)
    assert secret not in out and quote(secret, safe="") not in out, out
    assert base64.b64encode(secret.encode()).decode() not in out


@pytest.mark.parametrize(
    "text",
    [
        "see https://example.com/a%20b%20c?q=caf%C3%A9 for details",
        "img " + IMAGE,
        "id 123e4567-e89b-12d3-a456-426614174000, commit 4537e47d1b43a1cb17088aaa0000111122223333",
        "hash sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "a base64 word: " + base64.b64encode(b"hello, this is plain text").decode(),
        "regex = r'\\u00e9t\\u00e9' and x=3D4",
    ],
)  # fmt: skip
def test_encoded_text_without_a_credential_is_left_as_it_came(text: str) -> None:
    assert redact_text(text, KEY) == text


def test_a_lone_surrogate_beside_a_credential_is_no_error() -> None:
    """A JSON ``\\ud800`` decodes to a code point UTF-8 cannot hold; the engines that
    read UTF-8 must neither fail on it nor let the key beside it through."""
    key = "gsk_" + "a1B2" * 13
    assert key not in redact_text(f"lone \ud800 then {key}", KEY)
    body = b'{"messages":[{"role":"user","content":"a \\ud800 b ' + key.encode() + b'"}]}'
    out = redact_body(body, KEY)
    assert key.encode() not in out and b"\\ud800" in out
