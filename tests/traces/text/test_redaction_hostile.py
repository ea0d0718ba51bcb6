"""Redaction of text written to be slow: its time grows with the text's length, not
with its square. One 400 KB prompt of ``a:b@`` repeated once took minutes and held
the recorder (every record after it lost); each shape here is timed at two lengths
in the same test, so a busy machine slows both alike."""

from __future__ import annotations

import time

import pytest

from tailreplay.traces.text.redact import redact_text

KEY = b"k" * 32
SHAPES = ["a:b@", "password=", "a=", "key: x ", 'a="b', "x://a:b", "token=ab12&", "Cookie: a"]


def _best_of_3(text: str) -> float:
    times = []
    for _ in range(3):
        began = time.perf_counter()
        redact_text(text, KEY)
        times.append(time.perf_counter() - began)
    return min(times)


@pytest.mark.parametrize("shape", SHAPES)
def test_time_grows_with_the_length_not_its_square(shape: str) -> None:
    short = shape * (40_000 // len(shape))
    long = shape * (160_000 // len(shape))
    ratio = _best_of_3(long) / _best_of_3(short)
    assert ratio < 8, f"{shape!r}: 4x the text took {ratio:.1f}x the time (square: 16x)"


def test_a_long_hostile_value_under_a_credentials_name_is_masked_whole() -> None:
    value = "Ab3" * 1_000  # 3,000 characters, past the 256 a value is read to at once
    out = redact_text(f"token={value} then", KEY)
    assert value[-100:] not in out and out.startswith("token=[SECRET:fp:")
    assert out.endswith(" then")
