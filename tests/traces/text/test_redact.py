"""The redaction rules (traces/text/redact.py), case by case: names, headers, paths, URLs,
text and JSON bodies. tests/proxy/test_redaction_corpus.py sends a corpus through the proxy."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tailreplay.cli import cli
from tailreplay.traces.text.redact import fingerprint, is_secret_name, redact_text
from tailreplay.traces.text.redact_bodies import redact_body, redact_value
from tailreplay.traces.text.redact_targets import (
    CleanValues,
    redact_headers,
    redact_path,
    redact_url,
)

KEY = b"k" * 32
_FP = re.compile(r"fp:[0-9a-f]{16}")


def shown(text: str) -> str:
    """Fingerprints as docs write them: ``fp:…``."""
    return _FP.sub("fp:…", text)


SECRET_NAMES = [
    "Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key", "Api-Key",
    "X-Auth-Token", "Ocp-Apim-Subscription-Key", "X-Goog-Api-Key", "X-Amz-Security-Token",
    "X-Amz-Signature", "X-Amz-Credential", "Private-Token", "X-Session-Id", "X-Session-Token",
    "X-Vault-Token", "X-Csrf-Token", "sig", "key", "token", "api_key", "apiKey", "APIKey",
    "access_token", "accessToken", "refresh_token", "client_secret", "aws_secret_access_key",
    "password", "passwd", "pwd", "passphrase", "secret", "oauth", "sessionid", "credentials",
    # suffixes, digits and versions; session ids
    "X-Api-Key2", "X-API-KEY-V2", "Api-Key-1", "X-Token-Value", "X-Private-Token2", "pw",
    "apikey2", "PHPSESSID", "jsessionid", "sid", "secret_string", "OPENAI_API_KEY",
    "x-api-key_v10", "oauth2", "apiKeys", "secret_keys", "ACCESS-KEYS",
    # plurals and one-time codes
    "passwords", "db_creds", "passcode", "otp", "otp_code", "X-Cookies", "totp", "hotp_code",
    "pwds", "sids", "sigs", "otps", "refresh_tokens", "accessTokens", "api_tokens",
]  # fmt: skip
READABLE_NAMES = [
    "Content-Type", "User-Agent", "X-Request-Id", "OpenAI-Organization", "OpenAI-Project",
    "Accept", "traceparent", "Keep-Alive", "Idempotency-Key", "x-ratelimit-remaining-tokens",
    "x-ratelimit-limit-tokens", "anthropic-ratelimit-tokens-remaining", "max_tokens",
    "max_completion_tokens", "maxOutputTokens", "token_count", "tokenCount", "key_id",
    "access_key_id", "prompt_cache_key", "author", "keywords", "user", "model",
    "code", "tokens_v2", "max_tokens_2", "key_value_pairs", "passenger", "sidebar", "v2",
    "keys", "num_keys", "monkeys", "hotkeys", "authors", "bypass",
    "sacred", "tokens", "input_tokens", "cached_tokens", "reasoning_tokens",
]  # fmt: skip


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_credential_names_are_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", READABLE_NAMES)
def test_other_names_stay_readable(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_header_names_are_secret_whatever_the_rule() -> None:
    assert is_secret_name("X-Tenant", frozenset({"x-tenant"}))


def test_headers_keep_readable_values_and_fingerprint_the_rest() -> None:
    headers = [
        ("Content-Type", "application/json"),
        ("X-Request-Id", "req-1"),
        ("X-Goog-Api-Key", "AIza-not-checked-by-shape"),
        ("X-Note", "using sk-abcdefghijklmnopqrstuv"),  # a harmless name, a key's shape
        ("X-Tenant", "acme"),
        ("Referer", "https://app.example/cb?token=abc123"),
    ]
    out = dict(redact_headers(headers, frozenset({"x-tenant"}), KEY))
    assert out["content-type"] == "application/json" and out["x-request-id"] == "req-1"
    for name in ("x-goog-api-key", "x-note", "x-tenant", "referer"):
        assert _FP.fullmatch(out[name]), name
    assert out["x-tenant"] == fingerprint(KEY, "acme")  # equal values, equal fingerprints


def test_remembered_clean_values_change_nothing_and_hold_no_secret() -> None:
    """The recorder remembers what it found clean (CleanValues): the records are the
    same as without, a secret is never remembered, and the sets stay bounded."""
    extra = frozenset({"x-tenant"})
    requests = [
        [("Host", "api"), ("Content-Type", "application/json"), ("X-Tenant", "acme")],
        [("Host", "api"), ("Authorization", "Bearer sk-abcdefghijklmnopqrstuv")],
        [("Host", "api"), ("X-Note", "using sk-abcdefghijklmnopqrstuv"), ("X-Empty", "")],
        [("Host", "api"), ("Content-Type", "application/json"), ("X-Tenant", "acme")],
    ]
    paths = ["/v1/chat/completions", "/v1/keys/sk-abcdefghijklmnopqrstu/x", "/m?key=a"] * 2
    clean = CleanValues(capacity=4)
    for headers in requests:
        assert redact_headers(headers, extra, KEY, clean) == redact_headers(headers, extra, KEY)
    for path in paths:
        assert redact_path(path, KEY, clean) == redact_path(path, KEY)
    remembered = " ".join(f"{n} {v}" for n, v in clean.headers) + " ".join(clean.paths)
    assert "sk-" not in remembered and "acme" not in remembered
    assert clean.paths == {"/v1/chat/completions"} and len(clean.headers) <= 4


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/v1/keys/sk-abcdefghijklmnopqrstu/x", "/v1/keys/fp:…/x"),
        ("/v1/keys/sk%2Dabcdefghijklmnopqrstu/x", "/v1/keys/fp:…/x"),
        ("/v1/x/key=abc123/y", "/v1/x/key=fp:…/y"),
        ("/v1/models;api_key=zzz;v=2", "/v1/models;api_key=fp:…;v=2"),
        ("/v1/files/ghp_abcdefghijklmnopqrstuvwxyz0123456789", "/v1/files/fp:…"),
        ("/v1/users/bob@example.com", "/v1/users/fp:…"),
        ("/v1/files/123456789012345", "/v1/files/123456789012345"),  # ids stay readable
        ("/v1/m?api_key=abc&limit=2", "/v1/m?api_key=fp:…&limit=2"),
        ("/v1/m?a=1;key=abc", "/v1/m?a=1;key=fp:…"),
        ("/v1/m?x=1;access_token=abc&b=a+b%21", "/v1/m?x=1;access_token=fp:…&b=a+b%21"),
        ("/v1/m?q=sk-abcdefghijklmnopqrstu", "/v1/m?q=fp:…"),
        ("/v1/m?sv=2024&sig=a%2Bb%3D&se=x", "/v1/m?sv=2024&sig=fp:…&se=x"),
        ("/v1/m?api-version=2024-02-01&max_tokens=5", "/v1/m?api-version=2024-02-01&max_tokens=5"),
        ("/v1/m?token=&flag", "/v1/m?token=&flag"),
    ],
)  # fmt: skip
def test_paths(path: str, expected: str) -> None:
    assert shown(redact_path(path, KEY)) == expected


def test_path_fingerprints_the_decoded_value() -> None:
    assert redact_path("/m?key=a%2Db", KEY) == redact_path("/m?key=a-b", KEY)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://user:pw@127.0.0.1:8000", "http://***@127.0.0.1:8000"),
        ("https://tok@api.example/v1?api-key=abc&x=1", "https://***@api.example/v1?api-key=***&x=1"),
        ("http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318/v1/traces"),
        ("http://h/v1/keys/sk-abcdefghijklmnopqrstu", "http://h/v1/keys/***"),
    ],
)  # fmt: skip
def test_urls_for_log_lines(url: str, expected: str) -> None:
    assert redact_url(url) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail bob@example.com", "mail [EMAIL:fp:…]"),
        ("password=hunter2 and api-key: zz", "password=[SECRET:fp:…] and api-key: [SECRET:fp:…]"),
        ("token: Bearer abcdefghijk", "token: [SECRET:fp:…]"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: [SECRET:fp:…]"),
        ("Cookie: session=abc123; theme=dark", "Cookie: [SECRET:fp:…]"),
        ("https://x.example/c?sv=2024&sig=AbC%2Bd", "https://x.example/c?sv=2024&sig=[SECRET:fp:…]"),
        ("header Basic dXNlcjpwYXNz", "header [BASIC:fp:…]"),
        ("a basic understanding", "a basic understanding"),  # not base64 of user:password
        ("use Bearer abcdefghijkl", "use [BEARER:fp:…]"),
        ("sk-proj-abcdefghijklmnop, sk_live_abcdefghijklmnop", "[KEY:fp:…], [KEY:fp:…]"),
        ("AKIAABCDEFGHIJKLMNOP", "[KEY:fp:…]"),
        ("glpat-abcdefghijklmnopqrst xoxb-1234567890-abc", "[KEY:fp:…] [KEY:fp:…]"),
        ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "[KEY:fp:…]"),
        ("jwt eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl", "jwt [KEY:fp:…]"),
        ("4111 1111 1111 1111, not 4111 1111 1111 1112", "[CARD:fp:…], not 4111 1111 1111 1112"),
        ("call +1 555 123 4567", "call [PHONE:fp:…]"),
        ("max_tokens=5, tokens: 7", "max_tokens=5, tokens: 7"),
        ("task_sk-abcdefghijklmnopqrstu", "task_sk-abcdefghijklmnopqrstu"),  # inside a word
        # any scheme before a credential; the name rule of headers, in text
        ("Authorization: Token abcdefgh12345678", "Authorization: [SECRET:fp:…]"),
        ("authorization: Bot MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ", "authorization: [SECRET:fp:…]"),
        ("Authorization: SSWS 00abcdefghijklmnop", "Authorization: [SECRET:fp:…]"),
        ("Authorization: Key fk_abcdefghijkl", "Authorization: [SECRET:fp:…]"),
        ("X-Api-Key2: abc123secret", "X-Api-Key2: [SECRET:fp:…]"),
        ("X-Token-Value: v4lue123", "X-Token-Value: [SECRET:fp:…]"),
        ("export OPENAI_API_KEY=abc123", "export OPENAI_API_KEY=[SECRET:fp:…]"),
        ("curl -H 'Ocp-Apim-Subscription-Key: 0123456789abcdef' https://x",
         "curl -H 'Ocp-Apim-Subscription-Key: [SECRET:fp:…]' https://x"),
        ('{"api_key": "abc123", "model": "m"}', '{"api_key": "[SECRET:fp:…]", "model": "m"}'),
        ("x=password=hunter2", "x=password=[SECRET:fp:…]"),
        ("Note: this is fine; charset=utf-8", "Note: this is fine; charset=utf-8"),
        # a URL's password, whatever the scheme
        ("postgres://u:p4ssw0rd@db/x", "postgres://u:[SECRET:fp:…]@db/x"),
        ("see https://admin:hunter2@host.example/x", "see https://admin:[SECRET:fp:…]@host.example/x"),
        ("http://host/x@y and http://host:8080/", "http://host/x@y and http://host:8080/"),
        # command lines and key files
        ("run: tool --password S3cr3t --verbose", "run: tool --password [SECRET:fp:…] --verbose"),
        ("tool --output out.txt --api-key abc123", "tool --output out.txt --api-key [SECRET:fp:…]"),
        ("mysql -u root -pS3cret -h db", "mysql -u root -p[SECRET:fp:…] -h db"),
        ("gcc -pthread -p x.c; ls --color auto", "gcc -pthread -p x.c; ls --color auto"),
        ("k: -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\nok",
         "k: [KEY:fp:…]\nok"),
        ("key: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA", "key: [KEY:fp:…]"),
        # a key's shape before a colon or an equals sign is no name
        ("key sk-proj-Ab3dEf6hIj1234567890: please rotate", "key [KEY:fp:…]: please rotate"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789: leaked", "[KEY:fp:…]: leaked"),
        # a harmless assignment does not swallow the credential after it
        ("c = OpenAI(api_key='abcDEF1234567890xyz')", "c = OpenAI(api_key='[SECRET:fp:…]')"),
        # a token as a URL's user
        ("https://ghp_abcdefghijklmnopqrstuvwxyz0123456789:x-oauth-basic@github.com/o/r",
         "https://[KEY:fp:…]:[SECRET:fp:…]@github.com/o/r"),
        # short credentials after a scheme, quoted values, every cookie pair
        ("Authorization: Bearer abc", "Authorization: [SECRET:fp:…]"),
        ("password: 'correct horse battery staple'", "password: '[SECRET:fp:…]'"),
        ("Cookie: theme=dark; remember_me=abc123def456xyz", "Cookie: [SECRET:fp:…]"),
        # dotted numbers are no phone numbers
        ("ip 192.168.100.200, v 10.0.19041.1234", "ip 192.168.100.200, v 10.0.19041.1234"),
    ],
)  # fmt: skip
def test_text(text: str, expected: str) -> None:
    assert shown(redact_text(text, KEY)) == expected


def test_a_masked_text_is_masked_no_further() -> None:
    once = redact_text(
        "bob@example.com sk-abcdefghijklmnopqrstu +1 555 123 4567 password=x token: y", KEY
    )
    assert redact_text(once, KEY) == once


def test_a_url_in_a_parameter_loses_its_password() -> None:
    path = "/v1/x?url=https%3A%2F%2Fadmin%3Ahunter2%40host&a=1"
    assert shown(redact_path(path, KEY)) == "/v1/x?url=fp:…&a=1"


def test_json_body_keeps_its_bytes_when_nothing_is_secret() -> None:
    body = b'{ "model" : "m",\n "messages": [{"role": "user", "content": "caf\\u00e9 \\"q\\""}],'
    body += b' "seed": 12345678901234, "max_tokens": 5, "n": 4111111111111111 }'
    assert redact_body(body, KEY) == body  # numbers are never taken for phone or card numbers


def test_json_body_masks_escaped_keys_secret_members_and_the_user() -> None:
    body = (
        json.dumps(
            {
                "user": "alice",
                "api_key": "abc",
                "password": 1234,
                "config": {"secret": {"a": "b", "list": ["c", 5]}, "other": "d"},
                "messages": [{"role": "user", "content": "ESC"}],
                "tool": {"arguments": json.dumps({"password": "hunter2"})},
                "max_tokens": 5,
            }
        )
        .replace("ESC", "key sk\\u002dabcdefghijklmnopqrstuv, caf\\u00e9")
        .encode()
    )
    out = json.loads(redact_body(body, KEY))
    assert out["user"] == fingerprint(KEY, "user:alice")  # what the record's session holds
    assert out["api_key"].startswith("[SECRET:fp:") and out["password"].startswith("[SECRET:fp:")
    secret = out["config"]["secret"]
    assert secret["a"].startswith("[SECRET:") and secret["list"][0].startswith("[SECRET:")
    assert out["config"]["other"] == "d"
    assert shown(out["messages"][0]["content"]) == "key [KEY:fp:…], café"
    assert shown(out["tool"]["arguments"]) == '{"password": "[SECRET:fp:…]"}'
    assert out["max_tokens"] == 5


def test_a_form_body_is_redacted_field_by_field() -> None:
    form = b"grant_type=password&password=hunter2&user=bob@example.com"
    assert shown(redact_body(form, KEY).decode()) == (
        "grant_type=password&password=[SECRET:fp:…]&user=[SECRET:fp:…]"
    )
    assert b"\xff" not in redact_body(b"\xffbinary", KEY)


_SECRETISH = st.sampled_from(
    ["sk-abcdefghijklmnopqrstu", "password=x", "bob@example.com", "Basic dXNlcjpwYXNz",
     "4111 1111 1111 1111", "caf\u00e9 \"q\" \\", ""]
)  # fmt: skip
_NAMES = st.one_of(st.text(max_size=8), st.sampled_from(["user", "api_key", "token", "max_tokens"]))
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20) | _SECRETISH,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_NAMES, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(doc=_JSON, indent=st.sampled_from([None, 1]), ascii_only=st.booleans())
def test_json_bodies_redact_as_their_parsed_form_does(
    doc: object, indent: int | None, ascii_only: bool
) -> None:
    body = json.dumps(doc, indent=indent, ensure_ascii=ascii_only).encode()
    redacted = redact_body(body, KEY)
    expected = redact_value(doc, KEY)
    assert json.loads(redacted) == expected
    if expected == doc:
        assert redacted == body


def test_an_invalid_upstream_is_shown_without_its_password() -> None:
    for url in ("ftp://user:hunter2@h/x", "http://user:hunter2@/x"):
        result = CliRunner().invoke(cli, ["proxy", "--upstream", url])
        assert result.exit_code == 2
        assert "hunter2" not in result.output and "***@" in result.stderr


def test_an_authorization_code_is_a_credential_in_a_url_only() -> None:
    assert shown(redact_path("/callback?code=SplxlOBeZQQYbYS6WxSbIA&state=xyz", KEY)) == (
        "/callback?code=fp:…&state=xyz"
    )
    assert shown(redact_path("/app;jsessionid=A1B2C3D4?PHPSESSID=9f8e7d&pw=hunter2", KEY)) == (
        "/app;jsessionid=fp:…?PHPSESSID=fp:…&pw=fp:…"
    )
    body = b'{"code": "print(1)", "language": "python"}'
    assert redact_body(body, KEY) == body


def test_a_list_of_keys_keeps_its_length_and_loses_its_keys() -> None:
    body = b'{"apiKeys": ["k-one-123", "k-two-456"], "model": "m"}'
    redacted = redact_body(body, KEY)
    assert shown(redacted.decode()) == (
        '{"apiKeys": ["[SECRET:fp:…]", "[SECRET:fp:…]"], "model": "m"}'
    )


def test_json_in_a_string_is_redacted_as_json() -> None:
    arguments = json.dumps({"apiKeys": ["k1-abcdef", "k2-ghijkl"], "q": "weather"})
    body = json.dumps({"tool_calls": [{"function": {"name": "f", "arguments": arguments}}]})
    redacted = json.loads(redact_body(body.encode(), KEY))
    inner = json.loads(redacted["tool_calls"][0]["function"]["arguments"])
    assert [shown(k) for k in inner["apiKeys"]] == ["[SECRET:fp:…]"] * 2
    assert inner["q"] == "weather"
    spans = redact_value(json.loads(body), KEY)
    assert "k1-abcdef" not in json.dumps(spans) and "weather" in json.dumps(spans)


def test_a_name_value_pair_naming_a_credential_loses_its_value_everywhere() -> None:
    doc = {
        "env": [
            {"name": "OPENAI_API_KEY", "value": "abc-123-def"},
            {"name": "HOME", "value": "/r"},
        ],
        "note": "abc-123-def again",
    }
    redacted = json.loads(redact_body(json.dumps(doc).encode(), KEY))
    mask = redacted["env"][0]["value"]
    assert shown(mask) == "[SECRET:fp:…]" and redacted["env"][1]["value"] == "/r"
    assert redacted["note"] == f"{mask} again"  # the same secret, the same mask
    assert redact_value(doc, KEY) == redacted  # span content too


def test_form_and_multipart_fields_are_judged_by_their_names() -> None:
    form = b"user=bob&user[password]=hunter2&client_key=abc123&code=xyz&n=2"
    assert shown(redact_body(form, KEY).decode()) == (
        "user=bob&user[password]=[SECRET:fp:…]&client_key=[SECRET:fp:…]&code=[SECRET:fp:…]&n=2"
    )
    multipart = (
        b'--XyZ\r\nContent-Disposition: form-data; name="api_key"\r\n\r\nv4lue-1234\r\n'
        b'--XyZ\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nhi password=x\r\n'
        b'--XyZ\r\nContent-Disposition: form-data; name="f"; filename="a.bin"\r\n\r\n'
        b"\xff\x00bin\r\n--XyZ--\r\n"
    )
    redacted = redact_body(multipart, KEY)
    assert b"v4lue-1234" not in redacted and b"password=x" not in redacted
    assert b"\xff\x00bin\r\n--XyZ--\r\n" in redacted  # the file's bytes as sent
    assert redacted.count(b"--XyZ") == 4


def test_more_places_found_by_an_outside_attack() -> None:
    assert is_secret_name("api_key_base64") and is_secret_name("X-Token-B64")
    token = "123456789:AA" + "b" * 33
    assert token not in redact_path(f"/bot{token}/getMe", KEY)
    deep = json.loads("[" * 900 + '"x"' + "]" * 900)
    assert "[NESTED]" in json.dumps(redact_value(deep, KEY))


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_a_body_in_another_unicode_encoding_is_read_in_it(encoding: str) -> None:
    # Read as UTF-8, UTF-16 text has a zero byte between its letters: no rule saw
    # a word, and every credential in it was kept.
    doc = {"password": "hunter22", "messages": [{"content": "key sk-proj-abcdefghijklmnopqrst"}]}
    body = json.dumps(doc).encode(encoding)
    redacted = redact_body(body, KEY)
    assert redacted[:2] == body[:2]  # the byte order mark, or its absence, kept
    text = redacted.decode(encoding)
    assert "hunter22" not in text and "abcdefghij" not in text
    assert json.loads(redacted)["password"].startswith("[SECRET:fp:")


def test_numbers_in_a_secret_value_are_masked_at_any_depth() -> None:
    doc = {"pins": [7], "password": [1234, {"a": 77, "b": [88]}, True], "n": [99]}
    body = json.dumps(doc).encode()
    redacted = json.loads(redact_body(body, KEY))
    assert redacted == redact_value(doc, KEY)
    assert redacted["n"] == [99] and redacted["pins"] == [7] and redacted["password"][2] is True
    assert not re.search(r"\b(?:1234|77|88)\b", json.dumps(redacted["password"]))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("curl -u admin:hunter2 https://h/x", "curl -u [SECRET:fp:…] https://h/x"),
        ("curl -s --user=bob:s3cr3t! https://h", "curl -s --user=[SECRET:fp:…] https://h"),
        ("curl -uroot:toor https://h", "curl -u[SECRET:fp:…] https://h"),
        ("curl -u bob https://h", "curl -u bob https://h"),  # curl asks for the password
    ],
)
def test_curls_user_option_loses_its_password(text: str, expected: str) -> None:
    assert shown(redact_text(text, KEY)) == expected


@pytest.mark.parametrize(
    "body",
    [
        b'a preamble\r\n--XyZ\r\nContent-Disposition: form-data; name="api_key"\r\n\r\n'
        b"v4lue-1234\r\n--XyZ--\r\n",
        b'--XyZ\nContent-Disposition: form-data; name="password"\n\nv4lue-1234\n--XyZ--\n',
        b"--XyZ\r\nContent-Disposition: form-data; name=token\r\n\r\nv4lue-1234\r\n"
        b"--XyZ--\r\nan epilogue password=v4lue-5678\r\n",
    ],
    ids=["preamble", "lf-only", "unquoted-name"],
)
def test_multipart_forms_as_clients_write_them(body: bytes) -> None:
    redacted = redact_body(body, KEY)
    assert b"v4lue-" not in redacted and b"[SECRET:fp:" in redacted
    assert redacted.count(b"--XyZ") == body.count(b"--XyZ")


def test_a_tool_parameter_named_like_a_credential_keeps_its_schema() -> None:
    # A masked `"type"` makes the replayed request one the target refuses.
    parameters = {
        "type": "object",
        "properties": {"password": {"type": "string"}, "api_key": {"type": "string"}},
        "required": ["password"],
    }
    doc = {
        "tools": [{"type": "function", "function": {"name": "login", "parameters": parameters}}],
        "properties": {"a": 1},
        "after": [{"password": "hunter22"}],  # past the schema, a member again
    }
    body = json.dumps(doc).encode()
    redacted = json.loads(redact_body(body, KEY))
    assert redacted["tools"] == doc["tools"]
    assert redacted == redact_value(doc, KEY)
    assert redacted["after"][0]["password"].startswith("[SECRET:fp:")


@pytest.mark.parametrize(
    "body",
    [
        b"\x00password=hunter2xyz and more text here",  # read as UTF-16, no rule saw it
        b"A\x00password=hunter2xyz and more text",
        b"\x0a\x00\x12\x2dsk-proj-abcdefghijklmnopqrstuvwxyz0123456789A",  # protobuf
        b'[{"properties": {"a": 1}}, [{"password": "hunter2xyz"}]]',  # `}}, [{`: no schema
        # A prompt quoting a form: its "file" is prompt text.
        b"here is text\n--x\nContent-Type: text/plain; filename=a\n\npassword=hunter2xyz\n",
        b"--XyZ\r\nContent-Transfer-Encoding: 8bit\r\n"
        b'Content-Disposition: form-data; name="password"\r\n\r\nhunter2xyz\r\n--XyZ--\r\n',
    ],
    ids=["nul-first", "nul-second", "protobuf", "schema-closed", "quoted-form", "part-header"],
)
def test_bodies_an_outside_attack_found_leaking(body: bytes) -> None:
    redacted = redact_body(body, KEY)
    assert b"hunter2xyz" not in redacted and b"abcdefghijklmnop" not in redacted


def test_a_binary_body_that_looks_wide_is_kept_as_sent() -> None:
    body = b"\x00\x00\x00\x00\r\n\x0bhello world"  # gRPC framing: no UTF-32
    assert redact_body(body, KEY) == body
