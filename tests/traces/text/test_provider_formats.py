"""Providers' credential formats (gitleaks' rule set, ``provider_formats.json``): one
credential drawn from each format's own expression, in a prompt, a tool call's
arguments, a header and a query parameter under names of no credential, never
reaches what is recorded; and the formats leave outside text (the standard
library's sources) alone."""

from __future__ import annotations

import glob
import json
import re
import sysconfig
from urllib.parse import quote

import pytest

from scripts.provider_formats import to_python
from tailreplay.traces.text.code_values import is_plain_literal
from tailreplay.traces.text.provider_keys import ProviderFormat, _secret_groups, provider_keys
from tailreplay.traces.text.redact import redact_text
from tailreplay.traces.text.redact_bodies import redact_body
from tailreplay.traces.text.redact_targets import redact_headers, redact_path
from tests.helpers import DATA
from tests.regex_examples import example
from tests.traces.text.test_secret_corpus import NAMED, SHAPED_ONLY, _applies, _leaks

KEY = b"k" * 32
FORMATS = provider_keys().formats
PROVIDER_DATA = DATA / "provider_formats_examples.json"
UNDRAWN = {"kubernetes-secret-yaml"}
"""Formats whose expression the example generator cannot satisfy (a lookaround over
several lines); their credential kinds are covered by the name rule's tests."""


def _python(fmt: ProviderFormat) -> re.Pattern[str]:
    """The format's expression in Python's spelling (the example generator reads it)."""
    return re.compile(to_python(fmt.pattern.pattern))


def _drawn(index: int) -> tuple[str, list[str], str]:
    """(the example, the credentials in it, a keyword to place beside it). Drawn from
    the expression in Python's spelling, judged by RE2 as redaction runs it."""
    fmt = FORMATS[index]
    text = example(_python(fmt).pattern, index, lambda t: fmt.pattern.search(t) is not None)
    m = fmt.pattern.search(text)
    assert m is not None
    secrets = [m.group(g) for g in _secret_groups(m, fmt.pattern, fmt.group)]
    # A short group is a name or a separator a rule captures beside the secret; one
    # of under 4 characters (a drawn password `0`) is in any output by chance.
    long = [s for s in secrets if len(s) >= 6] or [s for s in secrets[:1] if len(s) >= 4]
    return text, long, fmt.keywords[0]


def _provider(format_id: str) -> str:
    """gitleaks names a rule `provider-what`, Nosey Parker `np.provider.N`, ours `own.…`."""
    dotted = format_id.startswith(("np.", "own."))
    return format_id.split(".")[1] if dotted else format_id.split("-")[0]


def test_the_formats_come_from_named_sources_with_at_least_150_providers() -> None:
    keys = provider_keys()
    assert keys.source.startswith("gitleaks v8.") and "Nosey Parker v0." in keys.source
    providers = {_provider(f.id) for f in FORMATS}
    assert len(FORMATS) >= 300 and len(providers) >= 150, len(providers)


NOSEY_PARKER = [
    (f.id, example)
    for f in FORMATS
    if f.id.startswith("np.")
    for example in json.loads(PROVIDER_DATA.read_text())["examples"].get(f.id, [])
]


@pytest.mark.parametrize(("format_id", "example"), NOSEY_PARKER, ids=[i for i, _ in NOSEY_PARKER])
def test_nosey_parkers_own_examples_lose_their_credential(format_id: str, example: str) -> None:
    """Examples written by Nosey Parker's authors (code, configuration, logs): what the
    rule's last group captures (a password after its user, a key after its account)
    is gone from the redacted text; an example's placeholder (``aaaa…``, ``password``,
    ``%nothing%``) is none."""
    fmt = next(f for f in FORMATS if f.id == format_id)
    m = fmt.pattern.search(example)
    assert m is not None
    out = redact_text(example, KEY)
    # The secret is the group redaction takes: the last a rule captures (after a user,
    # a host, an account), a database URI's password.
    secret = m.group(_secret_groups(m, fmt.pattern, fmt.group)[0])
    placeholder = len(set(secret)) < 5 or (secret.isalpha() and secret.islower())
    if placeholder or is_plain_literal(secret):
        pytest.skip(f"a placeholder, not a credential: {secret!r}")
    assert secret not in out, (format_id, secret, out[:300])


@pytest.mark.parametrize("index", range(len(FORMATS)), ids=[f.id for f in FORMATS])
def test_a_credential_of_each_format_is_masked_wherever_it_is(index: int) -> None:
    if FORMATS[index].id in UNDRAWN:
        pytest.skip("no example can be drawn from this expression")
    text, secrets, keyword = _drawn(index)
    if not secrets:
        pytest.skip("the credential drawn is too short to look for in the output")
    # A keyword beside it, as a provider's credential is seen (gitleaks opens a
    # format only where one of its keywords is), under no credential's name.
    prose = f"{keyword} said\n{text}\ntoday"  # on a line of its own: rules may anchor there
    chat = {"model": "m", "messages": [{"role": "user", "content": prose}]}
    tool = {"tool_calls": [{"function": {"name": "f", "arguments": json.dumps({"note": prose})}}]}
    placed = {
        "prompt": redact_body(json.dumps(chat).encode(), KEY).decode(),
        "tool_arguments": redact_body(json.dumps(tool).encode(), KEY).decode(),
        "completion": redact_text(prose, KEY),
        "header": "\n".join(v for _, v in redact_headers([("X-Note", prose)], frozenset(), KEY)),
    }
    placed["query"] = redact_path(f"/v1/x?note={quote(prose, safe='')}", KEY)
    leaked = [
        (where, secret[:40])
        for secret in secrets
        for where, out in placed.items()
        if secret in out or json.dumps(secret)[1:-1] in out or quote(secret, safe="") in out
    ]
    assert leaked == [], (FORMATS[index].id, leaked)


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


PLACEMENTS = sorted(NAMED) + sorted(SHAPED_ONLY)
_URL_RESERVED = re.compile(r"[/?#@\s\"'<>%]")
"""What a URL's password cannot hold as it is: a client percent-encodes it."""


def _placed_value(
    placement: str, fmt: ProviderFormat, text: str, secret: str, keyword: str
) -> str | None:
    """What a placement is given for one credential, or None where it cannot go: under
    a credential's name, the credential alone (its quotes aside: a value is what they
    hold); anywhere else, beside its format's keyword, on its own line where the format
    anchors to lines (``^``, ``$``). A header, a URL or a path holds no line break, and a
    URL's password nothing it would have to encode."""
    if placement in NAMED:
        value = secret.strip("\"'")
        if re.search(r"[\s\\]", value) or len(value) < 6:
            return None  # a fragment a format captures beside the credential
        if placement.startswith(("url", "prompt_percent")) and _URL_RESERVED.search(value):
            return None
        if placement == "prompt_cli" and value.startswith("-"):
            return None  # a command line takes a value opening on a dash for an option
        return value
    inline = f"{keyword} {text}"
    value = inline if fmt.pattern.search(inline + " x") else f"{keyword}\n{text}\n"
    return value if _applies(placement, value) else None


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_each_formats_credential_is_masked_in_every_placement_of_the_corpus(
    placement: str,
) -> None:
    """Every placement of tests/traces/text/test_secret_corpus.py (headers and query parameters
    under neutral names, JSON at depth, prompts, tool arguments, forms, pair lists,
    and the credential percent-encoded, base64-encoded and ``\\u``-escaped inside a
    prompt), for a credential of each format (``_placed_value``)."""
    place = NAMED.get(placement) or SHAPED_ONLY[placement]
    leaked, placed = [], 0
    for index, fmt in enumerate(FORMATS):
        if fmt.id in UNDRAWN:
            continue
        text, secrets, keyword = _drawn(index)
        for secret in secrets:
            value = _placed_value(placement, fmt, text, secret, keyword)
            if value is None:
                continue
            placed += 1
            if _leaks(secret.strip("\"'"), place(value)):
                leaked.append((fmt.id, secret[:24]))
    assert leaked == [], f"{len(leaked)} leaked in {placement}: {leaked[:8]}"
    assert placed >= len(FORMATS) // 2, placed
