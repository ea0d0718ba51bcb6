"""Bodies that other readers take for JSON but ``json.loads`` refuses, and text in
UTF-16 without a byte order mark: the names that mask a value in JSON mask it here."""

from __future__ import annotations

import pytest

from tailreplay.traces.text.redact import redact_text
from tailreplay.traces.text.redact_bodies import redact_body

KEY = b"k" * 32
SECRETS = (b"hunter2xyz", b"abcdefgh12345678", b"zzzzzzzzzzzzzz")


@pytest.mark.parametrize(
    "body",
    [
        b'{"password": "hunter2xyz", "apiKeys": ["abcdefgh12345678"],}',  # trailing comma
        b'{"a": 1}\n{"client_secret": "zzzzzzzzzzzzzz"}\n',  # one document a line
        '{"token": "hunter2xyz", "n": "caf\xe9"}'.encode("latin-1"),  # not UTF-8
        b'{"n": 1' + b"1" * 5000 + b', "secret": ["hunter2xyz"]}',  # past int's digit limit
        b'\xef\xbb\xbf\xef\xbb\xbf{"password": ["hunter2xyz", "abcdefgh12345678"]}',  # two BOMs
        b'[{"x": {"api_key": {"v": "zzzzzzzzzzzzzz"}}}, ]',
    ],
    ids=["trailing-comma", "ndjson", "latin-1", "long-int", "double-bom", "nested-object"],
)
def test_json_that_does_not_parse_is_redacted_as_json(body: bytes) -> None:
    redacted = redact_body(body, KEY)
    assert not any(s in redacted for s in SECRETS), redacted
    assert redacted.count(b"[SECRET:fp:") >= 1
    # Brackets stay where they were: the body keeps its shape for a reader.
    assert redacted.count(b"[") - redacted.count(b"[SECRET") == body.count(b"[")


def test_a_list_after_a_credential_name_in_text_is_not_itself_the_value() -> None:
    # Masking the bracket as the value broke the text's shape and kept the list.
    out = redact_text('config: "apiKeys": ["a", "b"], password: [hunter2xyz]', KEY)
    assert out.startswith('config: "apiKeys": ["a", "b"], password: [SECRET:fp:')
    assert "hunter2xyz" not in out


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le"])
def test_text_in_utf_16_without_a_byte_order_mark_is_read_in_it(codec: str) -> None:
    text = "Hello, my login is password=hunter2xyz; please keep it."
    redacted = redact_body(text.encode(codec), KEY)
    out = redacted.decode(codec)
    assert "hunter2xyz" not in out and out.startswith("Hello, my login is password=[SECRET:fp:")


def test_binary_bytes_that_decode_as_utf_16_are_not_text() -> None:
    # Zero bytes first, as a gRPC frame has: decodable as UTF-16, but not as text.
    body = b"\x00\x00\x00\x00\x10" + bytes(range(1, 32)) * 3
    assert redact_body(body, KEY).startswith(b"\x00\x00\x00\x00\x10")
