"""The one definition of a valid record and a valid header (docs/archive-format.md).

Every reader applies it: ``traces stats`` (whose C scanner gets the same table,
``COLSCAN_SPECS``), ``inspect``, ``merge``, ``slice``, ``replay`` and ``report``
therefore agree on what is damaged. A value of the wrong type or out of its range
makes the record damaged; a field that is absent or nil is fine; keys this version
does not know are ignored, whatever they hold.

>>> record_problem({"start_ns": 1, "output_tokens": "12"})
"'output_tokens' must be an int in 0..2^32-1 (got str)"
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tailreplay.traces.archive.capture_header import CAPTURE_CHECKS, SHADOW_CHECKS
from tailreplay.traces.archive.capture_header import KEY as CAPTURE_KEY
from tailreplay.traces.archive.capture_header import raw as raw_capture
from tailreplay.traces.archive.format import MAX_ARRAY_LEN, MAX_BIN_LEN, MAX_STR_LEN
from tailreplay.traces.archive.record import FIELDS
from tailreplay.traces.archive.replay_header import REPLAY_CHECKS
from tailreplay.traces.archive.value_checks import Check, is_str, is_strs, number
from tailreplay.units import CLOCK_END_NS

__all__ = [
    "CLOCK_END_NS",
    "COLSCAN_SPECS",
    "FIELD_SPECS",
    "MAX_NESTING",
    "capture_shadow",
    "clean_header",
    "header_problems",
    "record_problem",
    "target_ok",
    "token_ok",
    "without_invalid",
    "without_oversized",
]

# Kinds of field value; the numbers are shared with traces/archive/_colscan.c. TOKEN
# and TARGET are the parts of a request line a replay writes: an HTTP method (RFC 9110
# token) and an origin-form target ("/" then no space or control character, never
# "//"); PAIRS are headers, each name a token (after the ":" of an HTTP/2
# pseudo-header, as HAR files hold them), each value free of CR, LF and NUL.
INT, BOOL, STR, BIN, INTS, PAIRS, TOKEN, TARGET = range(8)

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(r"/(?!/)[^\x00-\x20\x7f]*")
_HEADER_NAME = re.compile(r":?[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_LINE_BREAK = re.compile(r"[\r\n\x00]")

_TIME = (0, CLOCK_END_NS)
"""Unix ns and durations."""
_TOKENS = (0, 1 << 32)
_BYTES = (0, 1 << 62)

# name -> (kind, lo, hi): INT and INTS hold ints with lo <= v < hi; BIN holds
# exactly ``hi`` bytes when hi > 0.
FIELD_SPECS: dict[str, tuple[int, int, int]] = {
    "start_ns": (INT, *_TIME),
    "trace_id": (BIN, 0, 16),
    "span_id": (BIN, 0, 8),
    "parent_span_id": (BIN, 0, 8),
    "duration_ns": (INT, *_TIME),
    "ttfb_ns": (INT, *_TIME),
    "ttft_content_ns": (INT, *_TIME),
    "chunk_gaps_us": (INTS, *_TIME),
    "chunk_gaps_more": (INTS, -1, 1 << 62),
    "method": (TOKEN, 0, 0),
    "path": (TARGET, 0, 0),
    "status": (INT, 0, 1000),
    "req_headers": (PAIRS, 0, 0),
    "req_body": (BIN, 0, 0),
    "model": (STR, 0, 0),
    "stream": (BOOL, 0, 0),
    "input_tokens": (INT, *_TOKENS),
    "output_tokens": (INT, *_TOKENS),
    "cached_tokens": (INT, *_TOKENS),
    "reasoning_tokens": (INT, *_TOKENS),
    "tokens_source": (STR, 0, 0),
    "max_tokens": (INT, *_TOKENS),
    "finish_reason": (STR, 0, 0),
    "prefix_hashes": (INTS, 0, 1 << 64),
    "prompt_entropy_mbits": (INT, 0, 64_000),
    "prompt_repetition_pm": (INT, 0, 1001),
    "session": (STR, 0, 0),
    "bytes_in": (INT, *_BYTES),
    "bytes_out": (INT, *_BYTES),
    "error": (STR, 0, 0),
    "error_message": (STR, 0, 0),
    "retry_after_ms": (INT, 0, 1 << 40),
    "shed": (BOOL, 0, 0),
    "orig_trace_id": (BIN, 0, 16),
    "orig_span_id": (BIN, 0, 8),
    "intended_ns": (INT, *_TIME),
    "sent_ns": (INT, *_TIME),
    "lag_ns": (INT, -(1 << 62) + 1, 1 << 62),
    "tail": (BOOL, 0, 0),
    "shard": (INT, 0, 1 << 32),
    "phase": (STR, 0, 0),
    "attempt": (INT, 1, 1 << 16),
    "retry_of": (BIN, 0, 8),
    "shadow_of": (BIN, 0, 8),
    "sample_point": (INT, 0, 1 << 64),
}
assert FIELD_SPECS.keys() == set(FIELDS), "every Record field has a spec"

COLSCAN_SPECS: tuple[tuple[bytes, int, int, int], ...] = tuple(
    (name.encode(), kind, lo, hi - 1 if kind in (INT, INTS) else hi)
    for name, (kind, lo, hi) in FIELD_SPECS.items()
)
"""The table for the C scanner: (name, kind, lo, hi inclusive) per field."""


def _range(lo: int, hi: int) -> str:
    """``lo..hi-1`` with powers of two spelled as such: ``0..2^32-1``, ``-2^62+1..2^62-1``."""

    def power(n: int) -> str | None:
        return f"2^{n.bit_length() - 1}" if n >= 1 << 16 and n & (n - 1) == 0 else None

    low = f"-{power(1 - lo)}+1" if lo < 0 and power(1 - lo) else str(lo)
    high = f"{power(hi)}-1" if power(hi) else str(hi - 1)
    return f"{low}..{high}"


def _expect(kind: int, lo: int, hi: int) -> str:
    if kind == INT:
        return f"an int in {_range(lo, hi)}"
    if kind == INTS:
        return f"an array of ints in {_range(lo, hi)}"
    if kind == BIN:
        return f"bin of {hi} bytes" if hi else "bin"
    return {
        BOOL: "a bool",
        STR: "a str",
        PAIRS: "an array of [name, value] pairs (a token, no CR, LF or NUL)",
        TOKEN: "an HTTP token (a method)",
        TARGET: 'a request target ("/" then no space or control character)',
    }[kind]


# msgpack arrays read as lists; a Record built in memory may hold tuples (its
# req_headers pairs), which are written as the same arrays.
_ARRAYS = frozenset({list, tuple})
_NESTS = frozenset({list, tuple, dict})
MAX_NESTING = 32
"""Levels of arrays and maps a value of a key this version does not know may nest (the
C scanner's MAX_DEPTH): every consumer walks values recursively (inspect prints them,
exports encode them), and Python's recursion stops near 1,000."""


def _shallow(value: Any) -> bool:
    """Whether ``value`` nests at most ``MAX_NESTING`` levels of arrays and maps."""
    level = [value]
    for _ in range(MAX_NESTING):
        inner: list[Any] = []
        for v in level:
            if type(v) is dict:
                inner.extend(v.values())
            elif type(v) in _ARRAYS:
                inner.extend(v)
        level = inner
        if not level:
            return True
    return not any(type(v) in _NESTS for v in level)


def _ints_ok(v: list[Any], lo: int, hi: int) -> bool:
    return not v or (set(map(type, v)) == {int} and min(v) >= lo and max(v) < hi)


def _pairs_ok(v: list[Any]) -> bool:
    # One pass, a pair at a time: a request's few headers take a third of the time
    # that building sets of types and lengths over them did (every record written).
    name_ok, line_break = _HEADER_NAME.fullmatch, _LINE_BREAK.search
    for pair in v:
        if type(pair) not in _ARRAYS or len(pair) != 2:
            return False
        name, value = pair
        if type(name) is not str or type(value) is not str:
            return False
        if name_ok(name) is None or line_break(value) is not None:
            return False
    return True


# Methods and paths found good, each looked up before its pattern: a replay checks a
# request's method and path when it reads the record and again when it writes the
# result, thousands a second, and most share a few values. Bounded: a file of distinct
# paths empties the set now and then.
_GOOD_TOKENS: set[str] = set()
_GOOD_TARGETS: set[str] = set()
_GOOD_MAX = 4096


def token_ok(v: Any) -> bool:
    """An HTTP token (RFC 9110): what a method is."""
    if type(v) is not str:
        return False
    if v in _GOOD_TOKENS:
        return True
    return _remember(_GOOD_TOKENS, v, _TOKEN.fullmatch(v) is not None)


def target_ok(v: Any) -> bool:
    """An origin-form request target: "/" then no space or control character, never
    "//" (read as a host by some servers)."""
    if type(v) is not str:
        return False
    if v in _GOOD_TARGETS:
        return True
    return _remember(_GOOD_TARGETS, v, _TARGET.fullmatch(v) is not None)


def _remember(good: set[str], v: str, ok: bool) -> bool:
    if ok:
        if len(good) >= _GOOD_MAX:
            good.clear()
        good.add(v)
    return ok


def _value_ok(value: Any, kind: int, lo: int, hi: int) -> bool:
    t = type(value)
    if kind == INT:
        return t is int and lo <= value < hi
    if kind == STR:
        return t is str
    if kind == TOKEN:
        return token_ok(value)
    if kind == TARGET:
        return target_ok(value)
    if kind == BIN:
        return t is bytes and (hi == 0 or len(value) == hi)
    if kind == BOOL:
        return t is bool
    if kind == INTS:
        return t in _ARRAYS and _ints_ok(value, lo, hi)
    return t in _ARRAYS and _pairs_ok(value)


def _explain(m: Any) -> str | None:
    """What is wrong with the record map ``m`` (the slow path; None when nothing)."""
    if type(m) is not dict:
        return f"a {type(m).__name__}, not a record map"
    if m.get("start_ns") is None:
        return "no start_ns"
    odd = next((k for k in m if type(k) is not str), None)
    if odd is not None:  # JSON, and every field name, is a string
        return f"a key that is not a string ({type(odd).__name__} {ascii(odd)[:40]})"
    for key, value in m.items():
        spec = FIELD_SPECS.get(key)
        if spec is None and type(value) in _NESTS and not _shallow(value):
            return f"{key!r} nests arrays and maps deeper than {MAX_NESTING} levels"
        if spec is None or value is None or _value_ok(value, *spec):
            continue
        got = type(value).__name__
        if type(value) is int or type(value) is float:
            got = repr(value)
        elif type(value) is bytes and spec[0] == BIN:
            got = f"{len(value)} bytes"
        elif type(value) is str and spec[0] in (TOKEN, TARGET):
            got = ascii(value[:60])  # escaped: it may hold a line break or an escape
        return f"{key!r} must be {_expect(*spec)} (got {got})"
    return None


def without_invalid(m: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """``m`` without the fields a reader would call damage, and what was wrong with each
    (``record_problem``'s phrase); None for the map when its ``start_ns`` is not valid,
    since no record is kept without one. What writers do with a record made from
    what a client or server sent, so that an archive tailreplay wrote is always read
    whole."""
    start = m.get("start_ns")
    if start is None or not _value_ok(start, *FIELD_SPECS["start_ns"]):
        return None, [_explain(m) or "no start_ns"]
    kept: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in m.items():
        spec = FIELD_SPECS.get(key)
        if type(key) is not str:
            problems.append(f"a key that is not a string ({type(key).__name__})")
        elif spec is None and type(value) in _NESTS and not _shallow(value):
            problems.append(_explain({"start_ns": start, key: value}) or key)
        elif spec is None or value is None or _value_ok(value, *spec):
            kept[key] = value
        else:
            problems.append(_explain({"start_ns": start, key: value}) or key)
    return kept, problems


def without_oversized(m: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``m`` without the values longer than a reader unpacks (``traces/archive/format.py``: a
    string over 1 MiB, bytes over 64 MiB, an array over 2^20 items), and what each was:
    a reader would call the record, and what follows it, damage. Only a record packed
    to 1 MiB or more can hold one."""
    kept: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in m.items():
        if _oversized(value):
            problems.append(f"{key!r} is longer than an archive holds")
        else:
            kept[key] = value
    return kept, problems


def _oversized(value: Any) -> bool:
    if type(value) is str:  # UTF-8 takes at most 4 bytes a character (3 for a surrogate)
        return len(value) > MAX_STR_LEN // 4 and len(value.encode("utf-8", "replace")) > MAX_STR_LEN
    if type(value) is bytes:
        return len(value) > MAX_BIN_LEN
    if type(value) in _ARRAYS:
        return len(value) > MAX_ARRAY_LEN or any(map(_oversized, value))
    return False


# Records of one writer share their keys, in one order: a checker compiled for that
# key sequence tests each field with one type test (and a range test), no lookups.
_Checker = Callable[[dict[str, Any]], bool]
_checkers: dict[tuple[str, ...], _Checker] = {}
_seen_once: set[tuple[str, ...]] = set()
_MAX_CHECKERS = 256  # a hostile file cannot grow the caches without bound


def _compile(keys: tuple[str, ...]) -> _Checker:
    if "start_ns" not in keys or any(type(k) is not str for k in keys):
        return lambda m: False
    names = [f"v{i}" for i in range(len(keys))]
    lines = ["def check(m):", f"    {', '.join(names)}, = m.values()"]
    for v, key in zip(names, keys, strict=True):
        spec = FIELD_SPECS.get(key)
        if spec is None:  # not checked, but for how deep it nests
            lines.append(f"    if type({v}) in nests and not shallow({v}): return False")
            continue
        kind, lo, hi = spec
        test = {
            INT: f"type({v}) is not int or not {lo} <= {v} < {hi}",
            BOOL: f"type({v}) is not bool",
            STR: f"type({v}) is not str",
            BIN: f"type({v}) is not bytes{f' or len({v}) != {hi}' if hi else ''}",
            INTS: f"type({v}) not in arrays or not ints_ok({v}, {lo}, {hi})",
            PAIRS: f"type({v}) not in arrays or not pairs_ok({v})",
            TOKEN: f"not token_ok({v})",
            TARGET: f"not target_ok({v})",
        }[kind]
        nil = "" if key == "start_ns" else f"{v} is not None and "
        lines.append(f"    if {nil}({test}): return False")
    lines.append("    return True")
    namespace: dict[str, Any] = {
        "ints_ok": _ints_ok,
        "pairs_ok": _pairs_ok,
        "token_ok": token_ok,
        "target_ok": target_ok,
        "arrays": _ARRAYS,
        "nests": _NESTS,
        "shallow": _shallow,
    }
    exec("\n".join(lines), namespace)
    checker: _Checker = namespace["check"]
    return checker


def record_problem(m: Any) -> str | None:
    """None when ``m`` is a valid record map, else what is wrong with it (one phrase)."""
    if type(m) is not dict:
        return _explain(m)
    keys = tuple(m)
    checker = _checkers.get(keys)
    if checker is None:
        # Compiled on the second sighting: a file whose every record has its own key
        # order (only a hostile one) pays the slow path, not a compile per record.
        if keys not in _seen_once:
            if len(_seen_once) >= 16 * _MAX_CHECKERS:
                _seen_once.clear()
            _seen_once.add(keys)
            return _explain(m)
        if len(_checkers) >= _MAX_CHECKERS:
            _checkers.clear()
        checker = _checkers[keys] = _compile(keys)
    return None if checker(m) else _explain(m)


# ---- headers ----------------------------------------------------------------------


_HEADER_CHECKS: dict[str, tuple[Check, str]] = {
    "created_ns": (lambda v: type(v) is int and 0 <= v < 1 << 63, "an int in 0..2^63-1"),
    "source": (is_str, "a str"),
    "upstream": (is_str, "a str"),
    "host": (is_str, "a str"),
    "tool_version": (is_str, "a str"),
    "ordered": (lambda v: type(v) is bool, "a bool"),
    "inputs": (is_strs, "an array of str"),
    **REPLAY_CHECKS,
    CAPTURE_KEY: (lambda v: type(v) is dict, "a map"),
    "peak": (lambda v: type(v) is dict, "a map"),
}
_PEAK_CHECKS: dict[str, tuple[Check, str]] = {
    "window_s": (number(0, 1e12), "a finite number in 0..1e12"),
    "by": (is_str, "a str"),
    "start_ns": (lambda v: type(v) is int and _TIME[0] <= v < _TIME[1], "an int in 0..2^62-1"),
}


def _problems(m: dict[str, Any], checks: dict[str, tuple[Check, str]], where: str) -> list[str]:
    out = []
    for key, (ok, expect) in checks.items():
        value = m.get(key)
        if value is not None and not ok(value):
            shown = repr(value) if type(value) in (int, float, bool) else type(value).__name__
            out.append(f"{where}{key} must be {expect} (got {shown})")
    return out


def header_problems(header: dict[str, Any]) -> list[str]:
    """What is wrong with the optional fields of a header (``format`` and ``version``
    are the reader's to check): one phrase per damaged field, e.g.
    ``capture.timeout_s must be a finite number of seconds in 0..1e9 (got nan)``."""
    out = _problems(header, _HEADER_CHECKS, "")
    for key, checks in ((CAPTURE_KEY, CAPTURE_CHECKS), ("peak", _PEAK_CHECKS)):
        sub = header.get(key)
        if type(sub) is dict:
            out += _problems(sub, checks, f"{key}.")
    shadow = capture_shadow(header)
    if shadow is not None:
        out += _problems(shadow, SHADOW_CHECKS, "capture.shadow.")
    deep = [k for k, v in header.items() if type(v) in _NESTS and not _shallow(v)]
    return out + [f"{k} nests arrays and maps deeper than {MAX_NESTING} levels" for k in deep]


def clean_header(header: dict[str, Any]) -> dict[str, Any]:
    """``header`` without its damaged fields (what ``--skip-corrupt`` reads)."""
    out = {
        k: v
        for k, v in header.items()
        if (k not in _HEADER_CHECKS or _valid(v, k, _HEADER_CHECKS))
        and (type(v) not in _NESTS or _shallow(v))
    }
    for key, checks in ((CAPTURE_KEY, CAPTURE_CHECKS), ("peak", _PEAK_CHECKS)):
        sub = out.get(key)
        if type(sub) is dict:
            out[key] = {k: v for k, v in sub.items() if k not in checks or _valid(v, k, checks)}
    shadow = capture_shadow(out)
    if shadow is not None:
        out[CAPTURE_KEY]["shadow"] = {
            k: v for k, v in shadow.items() if k not in SHADOW_CHECKS or _valid(v, k, SHADOW_CHECKS)
        }
    return out


def capture_shadow(header: Mapping[str, Any]) -> dict[str, Any] | None:
    """``capture.shadow`` (``proxy --shadow``: its target and share), when a map."""
    capture = raw_capture(header)
    shadow = capture.get("shadow") if capture is not None else None
    return shadow if type(shadow) is dict else None


def _valid(value: Any, key: str, checks: dict[str, tuple[Check, str]]) -> bool:
    return value is None or checks[key][0](value)
