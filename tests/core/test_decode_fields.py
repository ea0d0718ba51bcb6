"""decode_fields (orjson, json for what orjson refuses) gives the recorder and the
replayer the same fields json.loads gave them, on every input."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tailreplay.openai_api import ResponseTap, decode_fields, read_answer
from tailreplay.proxy.openai import request_info

CHAT = "/v1/chat/completions"

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_docs = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_docs)
def test_what_both_decoders_take_decodes_alike(doc: object) -> None:
    raw = json.dumps(doc).encode()
    assert repr(decode_fields(raw)) == repr(json.loads(raw))


def test_what_orjson_refuses_is_decoded_by_json() -> None:
    assert math.isnan(decode_fields(b"NaN"))
    assert decode_fields(b"1e400") == math.inf
    assert decode_fields(b'\xef\xbb\xbf{"model": "m"}') == {"model": "m"}
    assert decode_fields(b'"\\ud800"') == "\ud800"
    assert decode_fields('{"model": "m"}'.encode("utf-16")) == {"model": "m"}


def _body(**fields: object) -> bytes:
    return json.dumps({"model": "m", "messages": [], **fields}).encode()


def test_a_count_past_64_bits_is_no_count_as_before() -> None:
    # orjson gives such an integer as a float; json gave an int past the archive's
    # range: neither is a count.
    assert request_info(CHAT, _body(max_tokens=1 << 70)).fields.max_tokens is None
    assert request_info(CHAT, _body(max_tokens=-(1 << 70))).fields.max_tokens is None
    assert request_info(CHAT, _body(max_tokens=16)).fields.max_tokens == 16
    answer = b'{"choices": [], "usage": {"prompt_tokens": %d, "completion_tokens": 7}}'
    tap = ResponseTap(stream=False)
    tap.feed(answer % (1 << 70))
    problem, usage = read_answer(CHAT, 200, tap, None)
    assert (problem, usage.prompt_tokens, usage.completion_tokens) == (None, None, 7)


def test_bodies_neither_decoder_takes_are_not_kept() -> None:
    for raw in (b"\xff\xfe{", b"[" * 5000 + b"]" * 5000, b'{"model": "m",', b"\x00"):
        info = request_info(CHAT, raw)
        assert (info.body, info.fields.model) == (None, None), raw[:20]
    tap = ResponseTap(stream=False)
    tap.feed(b"[" * 5000 + b"]" * 5000)
    assert read_answer(CHAT, 200, tap, None)[0] == "bad_response"
