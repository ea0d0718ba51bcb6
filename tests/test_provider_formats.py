"""Providers' credential formats (gitleaks' rule set, ``provider_formats.json``): one
credential drawn from each format's own expression, in a prompt, a tool call's
arguments, a header and a query parameter under names of no credential, never
reaches what is recorded; and the formats leave outside text (the standard
library's sources) alone."""

from __future__ import annotations

import glob
import json
import sysconfig
from urllib.parse import quote

import pytest

from tailreplay.traces.text.provider_keys import _secret_group, provider_keys
from tailreplay.traces.text.redact import redact_headers, redact_path, redact_text
from tailreplay.traces.text.redact_bodies import redact_body
from tests.regex_examples import example

KEY = b"k" * 32
FORMATS = provider_keys().formats
UNDRAWN = {"kubernetes-secret-yaml"}
"""Formats whose expression the example generator cannot satisfy (a lookaround over
several lines); their credential kinds are covered by the name rule's tests."""


def _drawn(index: int) -> tuple[str, str, str]:
    """(the example, the credential in it, a keyword to place beside it)."""
    fmt = FORMATS[index]
    text = example(fmt.pattern.pattern, index)
    m = fmt.pattern.search(text)
    assert m is not None
    return text, m.group(_secret_group(m, fmt.group)), fmt.keywords[0]


def test_the_formats_come_from_a_named_source() -> None:
    keys = provider_keys()
    assert keys.source.startswith("v8.")  # gitleaks' version, from `git describe --tags`
    providers = {f.id.split("-")[0] for f in FORMATS}
    assert len(FORMATS) >= 200 and len(providers) >= 120, len(providers)


@pytest.mark.parametrize("index", range(len(FORMATS)), ids=[f.id for f in FORMATS])
def test_a_credential_of_each_format_is_masked_wherever_it_is(index: int) -> None:
    if FORMATS[index].id in UNDRAWN:
        pytest.skip("no example can be drawn from this expression")
    text, secret, keyword = _drawn(index)
    # A keyword beside it, as a provider's credential is seen (gitleaks opens a
    # format only where one of its keywords is), under no credential's name.
    prose = f"{keyword} said {text} today"
    chat = {"model": "m", "messages": [{"role": "user", "content": prose}]}
    tool = {"tool_calls": [{"function": {"name": "f", "arguments": json.dumps({"note": prose})}}]}
    placed = {
        "prompt": redact_body(json.dumps(chat).encode(), KEY).decode(),
        "tool_arguments": redact_body(json.dumps(tool).encode(), KEY).decode(),
        "completion": redact_text(prose, KEY),
        "header": "\n".join(v for _, v in redact_headers([("X-Note", prose)], frozenset(), KEY)),
    }
    if "\n" not in prose:
        placed["query"] = redact_path(f"/v1/x?note={quote(prose, safe='')}", KEY)
    leaked = [
        where
        for where, out in placed.items()
        if secret in out or json.dumps(secret)[1:-1] in out or quote(secret, safe="") in out
    ]
    assert leaked == [], (FORMATS[index].id, secret[:40], leaked)


def test_the_formats_leave_the_standard_library_alone() -> None:
    """The provider formats alone (the name rule is measured in bench/redaction.py):
    none of the standard library's modules holds what they find."""
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(f"{stdlib}/*.py"))
    assert len(files) > 150
    found = {}
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            hits = provider_keys().find(f.read())
        if hits:
            found[path] = [h.format for h in hits]
    assert found == {}
