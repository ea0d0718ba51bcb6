"""Gated pattern sets (traces/text/pattern_set.py): leaving out the patterns a text
cannot match changes no redaction, on the credential corpus placed in real prose,
on the benign corpus and on generated text."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailreplay.traces.text import redact
from tailreplay.traces.text.pattern_set import GATED_FROM, PatternSet, folded
from tailreplay.traces.text.redact import redact_text
from tests.secret_corpus import benign, credentials

KEY = b"k" * 32
# Real prose, not written for this test: a licence text as Debian installs it, else
# this project's own design notes.
_PROSE_FILES = [Path("/usr/share/common-licenses/GPL-3"), Path("docs/proxy.md")]
PROSE = next(p.read_text() for p in _PROSE_FILES if p.exists())


def _texts() -> list[str]:
    """4 KB windows of prose, each with a credential or a benign value placed in it."""
    rng = random.Random(5)
    values = [secret for _, secret, _ in credentials()]
    values += [v for vs in benign().values() for v in vs]
    out = []
    for value in values:
        start = rng.randrange(0, max(1, len(PROSE) - 4000))
        window = PROSE[start : start + 4000]
        at = rng.randrange(0, len(window))
        out.append(f"{window[:at]} {value} {window[at:]}")
    return out


def _ungated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PatternSet, "for_text", lambda self, text: self.every)


def test_every_character_a_case_insensitive_letter_matches_folds_to_it() -> None:
    # A lower-cased gate is looked for in folded text: a character that re takes
    # for an ASCII letter must fold to that letter, or a gate would hide a match.
    any_letter = re.compile(r"(?i)[a-z]")
    for code in range(128, 0x30000):
        char = chr(code)
        if any_letter.fullmatch(char):
            letters = [c for c in "abcdefghijklmnopqrstuvwxyz" if re.fullmatch(f"(?i){c}", char)]
            assert [folded(char)] == letters, hex(code)


def test_each_match_holds_one_of_its_patterns_gates() -> None:
    texts = _texts()
    for kinds in (redact._CREDENTIAL_KINDS, (redact._EMAIL,), redact._PII_KINDS):
        for kind, pattern, gates in kinds:
            compiled = re.compile(pattern)
            for text in texts:
                for m in compiled.finditer(text):
                    low = folded(m[0])
                    assert any(g in (m[0] if g != g.lower() else low) for g in gates), (kind, m[0])


def test_gated_redaction_is_the_redaction_with_every_pattern(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = _texts()
    assert all(len(t) >= GATED_FROM for t in texts)
    gated = [redact_text(t, KEY) for t in texts]
    _ungated(monkeypatch)
    assert gated == [redact_text(t, KEY) for t in texts]
    shaped = sum(shaped for _, _, shaped in credentials())  # found whatever their name
    assert sum(g != t for g, t in zip(gated, texts, strict=True)) >= shaped


_TRIGGERS = st.sampled_from(
    ["Bearer ", "Basic dXNlcjpwYXNz", "Cookie: a=b", "//u:p@h", "password=", ": ", "sk-",
     "AKIA", "ghp_", "xoxb-", "eyJ", "SG.", "AC", "-us1", ":AA", "sq0atp-", "--password ",
     "mysql -p", "curl -u ", "@x.com", "4111 1111 1111 1111", "+1 555 123 4567", "\u212a",
     "\u0131", "\u017f", "-----BEGIN ", "PRIVATE KEY-----", "a" * 40, "0" * 12, "\n", "'"]
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.one_of(_TRIGGERS, st.text(min_size=1, max_size=30)), max_size=80))
def test_generated_text_redacts_alike_gated_or_not(parts: list[str]) -> None:
    text = PROSE[:GATED_FROM] + "".join(parts)
    gated = redact_text(text, KEY)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _ungated(monkeypatch)
        assert gated == redact_text(text, KEY)


def _digits(text: str, zero: int) -> str:
    """``text`` with its digits written from the Unicode digit zero ``zero`` on."""
    return text.translate({ord(d): zero + int(d) for d in "0123456789"})


def test_a_digit_gate_stands_for_any_unicode_digit() -> None:
    prose = "Lorem ipsum dolor sit amet consectetur adipiscing elit. " * 6
    # Full-width and Arabic-Indic digits: `\d` matches them, a gate of "0"-"9" not.
    for number in (_digits("4111 1111 1111 1111", 0xFF10), _digits("+44 20 7946 0958", 0x0660)):
        text = prose + number
        assert len(text) >= GATED_FROM and number not in redact_text(text, KEY)
