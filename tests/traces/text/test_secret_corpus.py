"""Every credential of the corpus (tests/secret_corpus.py: 27 kinds, 324 credentials)
in every place a client can put one, through the redaction the recorder and the span
exporter apply; and the benign corpus through the same, for false positives.

A shaped credential (a vendor's format) must be masked wherever it is; any other only
under a credential's name. ``tests/proxy/test_redaction_corpus.py`` runs the real proxy
process in each body mode; this suite covers the placements at the rules' level.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest

from tailreplay.traces.text.redact import redact_text
from tailreplay.traces.text.redact_bodies import redact_body, redact_value
from tailreplay.traces.text.redact_targets import redact_headers, redact_path
from tests.secret_corpus import benign, credentials

KEY = b"k" * 32
CORPUS = credentials()


def _headers(pairs: list[tuple[str, str]]) -> str:
    return "\n".join(v for _, v in redact_headers(pairs, frozenset(), KEY))


def _body(doc: object) -> str:
    """The archive's redacted body and the span's redacted content, together."""
    raw = json.dumps(doc).encode()
    return redact_body(raw, KEY).decode() + "\n" + json.dumps(redact_value(doc, KEY))


def _chat(content: str) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


Placement = Callable[[str], str]
NAMED: dict[str, Placement] = {
    "header": lambda v: _headers([("X-Api-Key2", v), ("X-Token-Value", v)]),
    "header_scheme": lambda v: _headers(
        [("Authorization", f"{s} {v}") for s in ("Bearer", "Token", "Bot", "SSWS", "Key")]
    ),
    "query": lambda v: redact_path(f"/v1/x?a=1&apikey2={quote(v, safe='')}", KEY),
    "path_parameter": lambda v: redact_path(f"/v1/x;jsessionid={quote(v, safe='')}", KEY),
    "json_member": lambda v: _body({"model": "m", "api_key": v}),
    "json_deep": lambda v: _body({"a": {"b": [{"c": {"client_secret": v}}]}}),
    "json_list": lambda v: _body({"apiKeys": ["x-public", v]}),
    "prompt_assignment": lambda v: _body(_chat(f"export OPENAI_API_KEY={v}\nthen run it")),
    "prompt_header_line": lambda v: _body(
        _chat(f"curl -H 'Ocp-Apim-Subscription-Key: {v}' https://api.example.com")
    ),
    "prompt_cli": lambda v: _body(_chat(f"run: tool --password {v} --verbose")),
    "tool_arguments": lambda v: _body(
        {"tool_calls": [{"function": {"name": "login", "arguments": json.dumps({"pw": v})}}]}
    ),
    "name_value_pair": lambda v: _body({"env": [{"name": "DB_PASSWORD", "value": v}]}),
    "url_userinfo": lambda v: _body(_chat(f"connect to postgres://app:{v}@db.internal:5432/x")),
    "prompt_percent_encoded": lambda v: _body(
        _chat("callback ?next=" + quote(f"postgres://app:{v}@db.internal/x", safe=""))
    ),
    "prompt_base64_assignment": lambda v: _body(
        _chat("data:\n  env: " + base64.b64encode(f"client_secret={v}".encode()).decode())
    ),
    "form": lambda v: redact_body(f"user=bob&client_secret={quote_plus(v)}".encode(), KEY).decode(),
    "multipart": lambda v: redact_body(
        (
            '--b0undary\r\nContent-Disposition: form-data; name="api_key"\r\n\r\n'
            f"{v}\r\n--b0undary--\r\n"
        ).encode(),
        KEY,
    ).decode(),
}
SHAPED_ONLY: dict[str, Placement] = {
    "header_harmless_name": lambda v: _headers([("X-Debug-Note", f"tried {v} twice")]),
    "query_harmless_name": lambda v: redact_path(f"/v1/x?note={quote(v, safe='')}", KEY),
    "path_segment": lambda v: redact_path(f"/v1/keys/{quote(v, safe='')}/x", KEY),
    "prompt_text": lambda v: _body(_chat(f"here is my key {v} please keep it")),
    "prompt_escaped": lambda v: redact_body(
        json.dumps(_chat(f"key: {v}")).replace("-", "\\u002d").encode(), KEY
    ).decode(),
    "completion_text": lambda v: redact_text(f"The key you sent, {v}, is revoked.", KEY),
    "prompt_percent_encoded_bare": lambda v: _body(_chat(f"see ?k={quote(v, safe='')} ok")),
    "prompt_base64_bare": lambda v: _body(
        _chat(f"kind: Secret\ndata:\n  x: {base64.b64encode(v.encode()).decode()}\n")
    ),
    "prompt_u_escaped": lambda v: _body(
        _chat("log: " + "".join(f"\\u{ord(c):04x}" if c in "-_." else c for c in v))
    ),
}


def _pieces(secret: str) -> list[str]:
    """What must not appear: the secret (each line of a PEM block) and its encodings."""
    lines = [line for line in secret.split("\n") if len(line) >= 12] or [secret]
    out = []
    for line in lines:
        out += [line, quote(line, safe=""), quote_plus(line), json.dumps(line)[1:-1]]
        out.append(base64.b64encode(line.encode()).decode())
    return out


def _leaks(secret: str, output: str) -> list[str]:
    return [p for p in _pieces(secret) if p in output]


def _applies(name: str, secret: str) -> bool:
    # A header value or a path cannot hold a line break: PEM blocks go in bodies.
    return "\n" not in secret or not name.startswith(("header", "query", "path", "url"))


@pytest.mark.parametrize("placement", sorted(NAMED) + sorted(SHAPED_ONLY))
def test_no_credential_of_the_corpus_survives(placement: str) -> None:
    place = NAMED.get(placement) or SHAPED_ONLY[placement]
    leaked = [
        (kind, secret[:24])
        for kind, secret, shaped in CORPUS
        if (placement in NAMED or shaped)
        and _applies(placement, secret)
        and _leaks(secret, place(secret))
    ]
    assert leaked == [], f"{len(leaked)} leaked in {placement}: {leaked[:5]}"


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 300
    assert len({kind for kind, _, _ in CORPUS}) >= 25


@pytest.mark.parametrize("cls", sorted(benign()))
def test_benign_values_stay_as_they_are(cls: str) -> None:
    values = benign()[cls]
    changed = [v for v in values if redact_text(v, KEY) != v]
    in_bodies = [v for v in values if json.loads(redact_body(json.dumps(_chat(v)).encode(), KEY))]
    assert len(in_bodies) == len(values)
    assert len(changed) <= len(values) // 100, f"{cls}: {changed[:3]}"
