"""What a response says of its tokens (usage, any server's shape) and when they came (SSE)."""

from __future__ import annotations

import gzip
import json
import pickle

import pytest

from tailreplay.dialects import dialect_for, dialect_named
from tailreplay.http.sse import StreamTimeline
from tailreplay.openai_api import ResponseTap, parse_usage, read_answer, response_problem

OPENAI = {
    "prompt_tokens": 1200,
    "completion_tokens": 300,
    "total_tokens": 1500,
    "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0,
                                  "accepted_prediction_tokens": 0,
                                  "rejected_prediction_tokens": 0},
}  # fmt: skip

CHAT = dialect_named("chat")


def _sse(*events: dict[str, object] | str) -> bytes:
    return b"".join(
        b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    )


@pytest.mark.parametrize(
    ("body", "want"),
    [
        # OpenAI (and vLLM with token details): nested details, non-streamed.
        (json.dumps({"choices": [], "usage": OPENAI}).encode(), (1200, 300, 1024, 256)),
        # OpenAI streamed with include_usage: null usage on every chunk, then the totals.
        (_sse({"choices": [{"delta": {"content": "a"}}], "usage": None},
              {"choices": [], "usage": OPENAI}, "[DONE]"), (1200, 300, 1024, 256)),
        # vLLM and SGLang without details; llama.cpp's names are the same.
        (_sse({"usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}),
         (7, 3, None, None)),
        # The Responses API and Anthropic: input/output names, their own cache field.
        (json.dumps({"usage": {"input_tokens": 50, "output_tokens": 9,
                               "input_tokens_details": {"cached_tokens": 32},
                               "output_tokens_details": {"reasoning_tokens": 4}}}).encode(),
         (50, 9, 32, 4)),
        (json.dumps({"usage": {"input_tokens": 20, "output_tokens": 5,
                               "cache_read_input_tokens": 16}}).encode(), (20, 5, 16, None)),
        # vLLM's continuous usage stats: every chunk counts so far; the last wins.
        (_sse({"usage": {"prompt_tokens": 7, "completion_tokens": 1}},
              {"usage": {"prompt_tokens": 7, "completion_tokens": 2}}), (7, 2, None, None)),
        # Only the stream's tail was kept: a usage cut in half is skipped, not misread.
        (b'ns":{"cached_tokens":3}}, "x": 1}\n\n' + _sse({"usage": {"prompt_tokens": 5,
                                                                  "completion_tokens": 2}}),
         (5, 2, None, None)),
        (b'{"usage": {"prompt_tokens": 5, "completion_tok', (None, None, None, None)),
        (b'{"usage": null}', (None, None, None, None)),
        # Counts an archive holds (0 <= v < 2^32), else none: a hostile or broken server's.
        (b'{"usage": {"prompt_tokens": 4294967295, "completion_tokens": 4294967296}}',
         (4294967295, None, None, None)),
        (b'{"usage": {"prompt_tokens": -1, "completion_tokens": 100000000000000000000}}',
         (None, None, None, None)),
    ],
)  # fmt: skip
def test_usage_in_every_shape_servers_send(
    body: bytes, want: tuple[int | None, int | None, int | None, int | None]
) -> None:
    u = parse_usage(body)
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.reasoning_tokens) == want


def test_usage_in_a_gzipped_body_and_the_finish_reason() -> None:
    body = json.dumps({"choices": [{"finish_reason": "length"}], "usage": OPENAI}).encode()
    u = parse_usage(gzip.compress(body), "gzip")
    assert (u.prompt_tokens, u.reasoning_tokens, u.finish_reason) == (1200, 256, "length")


def _event(delta: dict[str, str]) -> bytes:
    return _sse({"choices": [{"index": 0, "delta": delta}]})


def test_the_timeline_counts_token_events_not_comments_or_empty_ones() -> None:
    t = StreamTimeline(CHAT)
    t.feed(b": ping\n\n", 1_000_000)  # a keep-alive while queued: not a token
    t.feed(_event({"role": "assistant", "content": ""}), 2_000_000)  # role only
    t.feed(_event({"content": "Hi"}), 7_000_000)
    t.feed(_event({"content": " there"}), 9_500_000)
    t.feed(_sse({"choices": [], "usage": OPENAI}, "[DONE]"), 10_000_000)
    t.finish(11_000_000)
    assert (t.first_ns, t.first_answer_ns, t.gaps_us, t.tokens) == (7_000_000, 7_000_000, [2500], 2)
    assert t.done and not t.malformed


def test_reasoning_comes_first_and_the_answer_is_timed_apart() -> None:
    t = StreamTimeline(CHAT)
    t.feed(_event({"role": "assistant", "reasoning_content": "Let"}), 5_000_000)
    t.feed(_event({"reasoning_content": " me"}), 6_000_000)
    t.feed(_event({"content": "Yes"}), 8_000_000)
    assert (t.first_ns, t.first_answer_ns) == (5_000_000, 8_000_000)
    assert (t.tokens, t.reasoning, t.gaps_us) == (3, 2, [1000, 2000])
    other = StreamTimeline(CHAT)  # the same, as servers other than DeepSeek's spell it
    other.feed(_event({"reasoning": "Hmm"}) + _event({"content": "No"}), 1_000_000)
    assert (other.tokens, other.reasoning, other.first_answer_ns) == (2, 1, 1_000_000)


@pytest.mark.parametrize("crlf", [False, True])
def test_events_split_or_coalesced_by_the_network(crlf: bool) -> None:
    end = b"\r\n\r\n" if crlf else b"\n\n"
    words = [_event({"content": w}).replace(b"\n\n", end) for w in ("a", "b", "c", "d")]
    t = StreamTimeline(CHAT)
    # An event in two reads counts when its blank line arrives...
    t.feed(words[0][:10], 1_000_000)
    t.feed(words[0][10:], 3_000_000)
    # ...and events that arrived in one read came together: one gap, then zeros.
    t.feed(words[1] + words[2] + words[3][:-1], 7_000_000)
    t.feed(words[3][-1:], 8_000_000)
    t.finish(9_000_000)
    assert t.first_ns == 3_000_000
    assert t.gaps_us == [4000, 0, 1000]
    assert t.tokens == 4


def test_a_stream_that_is_not_json_is_malformed_and_pickles_whole() -> None:
    t = StreamTimeline(CHAT)
    t.feed(b"data: <html>oops</html>\n\n", 1)
    t.feed(_event({"content": "x"}), 2)
    again = pickle.loads(pickle.dumps(t))
    assert (again.malformed, again.tokens, again.first_ns, again.done) == (1, 1, 2, False)


@pytest.mark.parametrize(
    ("path", "sse", "body", "problem"),
    [
        ("/v1/chat/completions", False, b'{"choices": []}', None),
        ("/v1/chat/completions", False, b"<html><body>Bad gateway</body></html>", "bad_response"),
        ("/v1/chat/completions", True, _event({"content": "a"}) + b"data: [DONE]\n\n", None),
        ("/v1/chat/completions", True, _event({"content": "a"}), "bad_response"),  # cut short
        ("/v1/completions", True, b"data: not json\n\ndata: [DONE]\n\n", "bad_response"),
        ("/v1/responses", True, _sse({"type": "response.completed"}), None),  # no [DONE] there
        ("/v1/responses", True, _sse({"type": "response.output_text.delta"}), "bad_response"),
        ("/v1/messages", True, _sse({"type": "message_stop"}), None),
        ("/v1/messages", True, _sse({"type": "message_start"}), "bad_response"),  # cut short
        ("/healthz", False, b"ok", None),  # not an OpenAI route: not judged
    ],
)
def test_an_answer_that_breaks_the_api_is_a_bad_response(
    path: str, sse: bool, body: bytes, problem: str | None
) -> None:
    dialect = dialect_for(path)
    timeline = StreamTimeline(dialect) if sse and dialect is not None else None
    tap = ResponseTap(stream=sse)
    tap.feed(body)
    if timeline is not None:
        timeline.feed(body, 1)
        timeline.finish(2)
    assert response_problem(path, 200, tap, timeline) == problem
    assert response_problem(path, 502, tap, timeline) is None  # the status says it already


_TWO_CHOICES = {"choices": [{"finish_reason": "length"}, {"finish_reason": "stop"}]}
_TWICE = b'{"usage": {"prompt_tokens": 1}, "x": {"usage": {"prompt_tokens": 7}}}'
_ESCAPED = b'{"m": "the \\"usage\\": {}", "usage": {"prompt_tokens": 5, "completion_tokens": 6}}'
_SPELT = b'{"us\\u0061ge": {"prompt_tokens": 5}, "k": "usage"}'  # the key spelt with an escape
_SPELT_TWICE = b'{"us\\u0061ge": {"prompt_tokens": 5}, "x": {"usage": {"prompt_tokens": 7}}}'
_DEEP = b"[" * 5000 + b"]" * 5000


@pytest.mark.parametrize(
    ("path", "status", "body"),
    [
        ("/v1/chat/completions", 200, json.dumps({**_TWO_CHOICES, "usage": OPENAI}).encode()),
        ("/v1/chat/completions", 200, b'{"usage": {"prompt_tokens": true, "input_tokens": 4}}'),
        ("/v1/chat/completions", 200, _TWICE),  # the last wins: the byte search decides
        ("/v1/responses", 200, b'{"response": {"usage": {"input_tokens": 3}}}'),
        ("/v1/chat/completions", 200, _ESCAPED),  # "usage" inside a string is not a key
        ("/v1/chat/completions", 200, _SPELT),
        ("/v1/chat/completions", 200, _SPELT_TWICE),
        ("/v1/models", 200, _DEEP),  # not an OpenAI route: never decoded
        ("/v1/chat/completions", 200, b"<html>not json</html>"),
        ("/v1/chat/completions", 200, b'{"usage": {"prompt_tokens": 9, "completion_tokens"'),
        ("/healthz", 200, b"ok"),
        ("/v1/chat/completions", 429, b'{"error": {"message": "slow down"}}'),
        ("/v1/embeddings", 200, b"[1, 2]"),
    ],
)
def test_reading_an_answer_once_agrees_with_the_byte_search(
    path: str, status: int, body: bytes
) -> None:
    """read_answer decodes a whole body once for both questions; what it says is what
    response_problem and parse_usage say of the same bytes."""
    tap = ResponseTap(stream=False)
    tap.feed(body)
    problem, usage = read_answer(path, status, tap, None)
    assert problem == response_problem(path, status, tap, None)
    assert usage == parse_usage(body)


def test_hostile_answers_and_requests_are_read_as_nothing_not_a_lost_record() -> None:
    """JSON nested past Python's stack (valid, and hostile), a gzip bomb: each is no
    usage and no budget, where it raised (the record was dropped) or inflated
    without bound."""
    from tailreplay.proxy.openai import request_info

    deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    assert request_info("/v1/chat/completions", deep).fields.max_tokens is None
    usage = b'{"usage": ' + deep + b"}"
    assert parse_usage(usage).prompt_tokens is None
    tap = ResponseTap(stream=False)
    tap.feed(usage)
    assert read_answer("/v1/chat/completions", 200, tap, None)[0] == "bad_response"
    bomb = gzip.compress(b'{"finish_reason": "' + b"x" * (64 << 20) + b'"}')
    assert len(bomb) < 100_000 and parse_usage(bomb, "gzip").finish_reason is None
