"""What a replayed request looks like on the wire.

The recorded method, path and body; recorded credentials are never sent (headers
come only from --header and TAILREPLAY_HEADER_* variables); the model renamed
by --model-map; the output budget forced with max_tokens / min_tokens /
ignore_eos (unless the target refused those fields); for records kept without a
body, a synthetic prompt of the recorded token count; and, last, the user's own
--body-set / --body-drop on every JSON body.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tailreplay.dialects import DEFAULT_ROUTE, Dialect, dialect_for
from tailreplay.replayer.prompts import PromptMaker
from tailreplay.replayer.schedule import MAX_BUDGET, MOST_INPUT_TOKENS, Planned
from tailreplay.traces.archive.record import Record

__all__ = ["DEFAULT_INPUT_TOKENS", "BodyEdits", "RequestBuilder", "RequestSpec", "prompt_tokens"]

log = logging.getLogger("tailreplay.replay")

DEFAULT_INPUT_TOKENS = 32
"""Prompt size for a record that kept neither a body nor an input token count."""
FORCED_FIELDS = ("min_tokens", "ignore_eos")
"""The fields that force an output length; a target's error naming one refused them."""
_PROMPT = "\x00tailreplay:prompt\x00"
"""Stands for the synthetic prompt in the body until the prompt's bytes replace it."""
_PROMPT_JSON = json.dumps(_PROMPT).encode()


def prompt_tokens(record: Record) -> int:
    """The prompt tokens a replay asks for ``record`` (which kept no body): as recorded,
    at most ``MOST_INPUT_TOKENS``."""
    return min(record.input_tokens or DEFAULT_INPUT_TOKENS, MOST_INPUT_TOKENS)


@dataclass(slots=True)
class RequestSpec:
    method: str
    path: str
    body: bytes | None
    stream: bool
    prompt_tokens: int | None
    """Our count of a synthetic prompt (to compare with the target's usage)."""
    forced: bool = False
    """Sent with min_tokens/ignore_eos (built again if the target refuses them first)."""
    abort_after_tokens: int | None = None
    """A recorded client abort: close the stream after this many token events..."""
    abort_after_s: float | None = None
    """...or, the tokens unknown, this long after sending (``--client-aborts replay``)."""
    budget: int | None = None
    """The output budget the body asks for, as sent (a recorded abort's headroom and
    ``--body-set`` included); None when it asks for none."""


@dataclass(frozen=True)
class BodyEdits:
    """--body-set and --body-drop: dotted keys into the JSON body (``stream_options.x``)."""

    assign: Mapping[str, Any] = field(default_factory=dict)
    drop: Sequence[str] = ()

    @classmethod
    def given(cls, sets: Sequence[tuple[str, Any]], drops: Sequence[str]) -> BodyEdits | None:
        """The edits the options ask for; None when they ask for none."""
        return cls(assign=dict(sets), drop=drops) if sets or drops else None

    def apply(self, body: dict[str, Any]) -> None:
        for key in self.drop:
            *parents, last = key.split(".")
            node: Any = body
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(last, None)
        for key, value in self.assign.items():
            *parents, last = key.split(".")
            node = body
            for part in parents:
                child = node.get(part)
                if not isinstance(child, dict):
                    child = node[part] = {}
                node = child
            node[last] = value


def _budget_of(dialect: Dialect | None, body: dict[str, Any]) -> int | None:
    """The output budget a request body asks for, in whichever field its dialect reads."""
    return dialect.budget_of(body) if dialect is not None else None


@dataclass(frozen=True, slots=True)
class _Frame:
    """A synthetic-prompt body as bytes before (``head``) and after (``tail``) the prompt."""

    head: bytes
    tail: bytes | None
    """None: the edits dropped the prompt's field, so the head is the whole body."""
    stream: bool
    forced: bool
    budget: int | None


_FRAMES = 4096
"""Bodies kept made (``RequestBuilder._frame``); past it they are made again."""

ABORT_HEADROOM_TOKENS = 16
"""A replayed abort asks for this many tokens past the point where it leaves."""


class RequestBuilder:
    def __init__(
        self,
        *,
        model_map: Mapping[str, str],
        force_lengths: bool,
        prompts: PromptMaker,
        default_model: str = "default",
        edits: BodyEdits | None = None,
        replay_aborts: bool = True,
    ) -> None:
        self.edits = edits
        self.replay_aborts = replay_aborts
        """Requests the client abandoned are abandoned at the same point (``_abort``)."""
        self.model_map = dict(model_map)
        self.force_lengths = force_lengths
        self.forced_fields_ok = True
        """False once the target rejected min_tokens/ignore_eos: they are not sent again."""
        self.prompts = prompts
        self.default_model = default_model
        self._frames: dict[tuple[Any, ...], _Frame] = {}

    def rejects_forced_fields(self, error_text: str) -> bool:
        """Is this error the target refusing min_tokens/ignore_eos? Stop sending them if so.

        Warns once, the first time; True for every such error, so the caller resends.
        """
        if not self.force_lengths or not any(f in error_text for f in FORCED_FIELDS):
            return False
        if self.forced_fields_ok:
            self.forced_fields_ok = False
            log.warning(
                "the target rejects min_tokens/ignore_eos; sending max_tokens only from now "
                "on (output lengths will follow the target's own stopping)"
            )
        return True

    def _model(self, model: str | None) -> str:
        name = model or self.default_model
        return self.model_map.get(name, name)

    def _force(self, body: dict[str, Any], budget: int | None, dialect: Dialect | None) -> bool:
        """Set the output budget in the dialect's field; True when min_tokens/ignore_eos
        went in with it. A dialect that generates nothing (embeddings) takes none."""
        if budget is None or dialect is None or not dialect.generates:
            return False
        dialect.set_budget(body, budget)
        if self.force_lengths and self.forced_fields_ok:
            body["min_tokens"] = budget
            body["ignore_eos"] = True
            return True
        return False

    def build(self, item: Planned, *, probe: bool = False) -> RequestSpec:
        """The request for ``item``; a ``probe`` (the preflight) is sent whole, even where
        the recorded client left, and draws its prompt outside the entropy tally."""
        if probe:
            return self._build(_probe_item(item), item.budget, tally=False)
        abort = self._abort(item.record)
        if abort is None:
            return self._build(item, item.budget)
        tokens, seconds = abort
        # Room past the abort point: the stream must still be running when it comes
        # (and a budget of at least one token, for a client that left before the first).
        budget = min(max(item.budget or 0, (tokens or 0) + ABORT_HEADROOM_TOKENS), MAX_BUDGET)
        spec = self._build(item, budget)
        spec.abort_after_tokens, spec.abort_after_s = tokens, seconds
        return spec

    def resized(self, item: Planned, spec: RequestSpec) -> bool:
        """Whether ``spec``, a synthetic prompt built ahead, would be sized otherwise now:
        the target's answers since have moved how it counts prompts (``target_count``),
        as the first answers of a target with a chat template of its own do."""
        if spec.prompt_tokens is None or item.record.req_body is not None:
            return False
        dialect = dialect_for(spec.path)
        return dialect is not None and sum(self._sized(item.record, dialect)) != spec.prompt_tokens

    def _sized(self, record: Record, dialect: Dialect) -> tuple[int, int]:
        """A synthetic prompt's content tokens, and the tokens its wrapping adds (a chat
        message's role), to us, for the target to count the record's input tokens."""
        overhead = self.prompts.overhead if dialect.chat_prompt else 0
        return self.prompts.content_tokens(prompt_tokens(record), overhead), overhead

    def _abort(self, record: Record) -> tuple[int | None, float | None] | None:
        """Where the recorded client left: after its stream's tokens (the proxy counts
        what reached the client), else after its duration; None: it did not leave."""
        if not self.replay_aborts or record.error != "client_abort":
            return None
        if record.stream and record.output_tokens:
            return record.output_tokens, None
        if record.duration_ns:
            return None, record.duration_ns / 1e9
        return None

    def _build(self, item: Planned, budget: int | None, *, tally: bool = True) -> RequestSpec:
        record = item.record
        method = record.method or "POST"
        path = record.path or DEFAULT_ROUTE
        dialect = dialect_for(path)
        if record.req_body is not None:
            return self._from_body(record.req_body, method, path, budget)
        if method != "POST" or dialect is None:
            # A call without a body (``GET /v1/models``); a POST no dialect could
            # rebuild never gets here (``rebuildable.py``).
            return RequestSpec(method, path, None, False, None)
        content, overhead = self._sized(record, dialect)
        # Keyed on the record's place in the stream and its copy, not its start alone:
        # requests stamped in one tick (or copies of one record) would otherwise get the
        # same text and share a prefix cache they never shared in production.
        key = item.key or record.trace_id or record.start_ns.to_bytes(8, "big", signed=True)
        salt = key + item.copy.to_bytes(4, "big")
        entropy = record.prompt_entropy_mbits
        # Rounded to a hundredth of a bit: the vocabulary for it is cached.
        bits = round(entropy / 1000, 2) if entropy is not None else None
        text = self.prompts.prompt(content, record.prefix_hashes, salt, bits, tally=tally)
        frame = self._frame(dialect, record.model, bool(record.stream), budget)
        ours = content + overhead
        # The prompt goes in as bytes: it is ASCII words and spaces, which JSON keeps as
        # they are, and escaping 650 KB of it would cost json.dumps a millisecond.
        tail = frame.tail
        raw = frame.head if tail is None else b"".join((frame.head, b'"', text, b'"', tail))
        return RequestSpec(method, path, raw, frame.stream, ours, frame.forced, budget=frame.budget)

    def _frame(
        self, dialect: Dialect, model: str | None, stream: bool, budget: int | None
    ) -> _Frame:
        """The JSON body around a synthetic prompt, in the record's dialect; the same for
        every request of one dialect, model, stream and budget, so it is made once (a
        replay sends thousands a second) and kept, a bounded number of them."""
        key = (dialect.name, model, stream, budget, self.forced_fields_ok)
        frame = self._frames.get(key)
        if frame is not None:
            return frame
        body = dialect.synthetic(self._model(model), stream and dialect.generates, _PROMPT)
        forced = self._force(body, budget, dialect)
        stream = body.get("stream") is True
        if self.edits is not None:
            self.edits.apply(body)
            stream = body.get("stream") is True
        head, found, tail = json.dumps(body).encode().partition(_PROMPT_JSON)
        # A --body-drop of the prompt's field: no prompt goes in (no tail, the head whole).
        frame = _Frame(head, tail if found else None, stream, forced, _budget_of(dialect, body))
        if len(self._frames) >= _FRAMES:
            self._frames.clear()
        self._frames[key] = frame
        return frame

    def _from_body(self, raw: bytes, method: str, path: str, budget: int | None) -> RequestSpec:
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return RequestSpec(method, path, raw, False, None)  # not JSON: sent as recorded
        if not isinstance(body, dict):
            return RequestSpec(method, path, raw, False, None)
        if "model" in body and isinstance(body["model"], str):
            body["model"] = self._model(body["model"])
        dialect = dialect_for(path)
        forced = self._force(body, budget, dialect)
        if dialect is not None:
            dialect.ask_usage(body)  # the target's own counts, to compare with the recorded
        if self.edits is not None:
            self.edits.apply(body)
        stream = body.get("stream") is True
        raw = json.dumps(body).encode()
        budget = _budget_of(dialect, body)
        return RequestSpec(method, path, raw, stream, None, forced, budget=budget)


PROBE_INPUT_TOKENS = 16
_PROBE_KEY = b"tailreplay preflight"
"""The probe's prompt is drawn on this key, which no record's (a trace or span id, a
start time) can be."""


def _probe_item(item: Planned) -> Planned:
    """The preflight's own request: the first request's route, model and stream, with a
    short prompt of its own (no recorded prefix, drawn on a key no record has), so it
    leaves nothing in the target's prefix cache that a recorded request could reuse. A
    request no dialect can build is sent as recorded."""
    record = item.record
    if (record.method or "POST") != "POST" or dialect_for(record.path or DEFAULT_ROUTE) is None:
        return item
    own = replace(
        record,
        req_body=None,
        input_tokens=PROBE_INPUT_TOKENS,
        prefix_hashes=None,
        prompt_entropy_mbits=None,
    )
    return replace(item, record=own, key=_PROBE_KEY, copy=0)
