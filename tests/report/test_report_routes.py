"""The report by API route (JSON ``routes``, the "By route" table) and the path and
model columns of ``--deltas``, hostile values included."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.report import routes
from tailreplay.report.compare import compare
from tailreplay.report.deltas import DELTA_COLUMNS
from tailreplay.report.side import load_side
from tests.helpers import HEADER, write_plain

T0 = 1_700_000_000 * 10**9
CHAT, MESSAGES, COMPLETIONS = "/v1/chat/completions", "/v1/messages", "/v1/completions"
HOSTILE = '/v1/x,"b"?a=1,"c"=cmd'
"""A path (a valid request target) with a comma and quotes, and more in its query."""
OTHER = "/v1/y=1+2"
FORMULA_MODEL = '=HYPERLINK("http://evil.example","x")'
BROKEN_MODEL = 'm\n=cmd,"q"\r'
UNREADABLE = '/v1/x?a=1,"b"\n=cmd'
"""No request target (a control character): the archive reader refuses the record."""


def _original(i: int, path: str, model: str | None, ms: int) -> dict[str, Any]:
    """Recorded request ``i``: streamed, ``ms`` long, its TTFT a quarter of that."""
    ids = {"trace_id": bytes([i + 1]) * 16, "span_id": bytes([i + 1]) * 8}
    times = {"start_ns": T0 + i * 10**8, "duration_ns": ms * 10**6, "ttfb_ns": ms * 10**6 // 4}
    tokens = {"input_tokens": 100 + i, "output_tokens": 20}
    m = dict(ids, **times, **tokens, method="POST", path=path, status=200, stream=True)
    return m if model is None else {**m, "model": model}


def _replay_of(m: dict[str, Any], factor: float, **changes: Any) -> dict[str, Any]:
    """The replay of ``m``, ``factor`` times as long, with ``changes``."""
    return dict(
        m,
        span_id=bytes(8),
        orig_trace_id=m["trace_id"],
        orig_span_id=m["span_id"],
        start_ns=m["start_ns"] + 10**12,
        lag_ns=10**5,
        duration_ns=round(m["duration_ns"] * factor),
        ttfb_ns=round(m["ttfb_ns"] * factor),
        **changes,
    )


def _recorded() -> list[dict[str, Any]]:
    """6 chat (one without a model), 4 messages, 2 on paths no dialect serves, 2
    embeddings; hostile paths and model names among them."""
    maps = [_original(i, CHAT, "llama", 100 + 10 * i) for i in range(6)]
    maps += [_original(6 + i, MESSAGES, FORMULA_MODEL, 200 + 10 * i) for i in range(4)]
    maps += [_original(10, HOSTILE, "-2+3", 50), _original(11, OTHER, BROKEN_MODEL, 60)]
    maps[1].pop("model")
    maps[2]["model"], maps[7]["model"] = "+cmd", "@SUM(A1)"
    maps += [_original(12 + i, "/v1/embeddings", "@SUM(A1)", 30) for i in range(2)]
    return maps


def _replayed(recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every original but the embeddings, twice as slow but one (faster: a negative
    delta), one messages request failed, one chat sent to another path (it still counts
    as chat: its original's route); and 3 completions without an original."""
    by_path: dict[str, list[dict[str, Any]]] = {}
    for m in recorded:
        by_path.setdefault(m["path"], []).append(m)
    out = [_replay_of(m, 2.0) for m in by_path[CHAT][1:]]
    out.append(_replay_of(by_path[CHAT][0], 0.5, path="/v1/responses", model="other-model"))
    out += [_replay_of(m, 2.0) for m in by_path[MESSAGES][1:]]
    out.append(_replay_of(by_path[MESSAGES][0], 2.0, status=500, error="http_500"))
    out += [_replay_of(m, 2.0) for p in (HOSTILE, OTHER) for m in by_path[p]]
    # Sent without an original (its own trace ids): counted under its own path.
    alone = [_original(20 + i, COMPLETIONS, "gpt", 40) for i in range(3)]
    out += [dict(m, stream=False, lag_ns=10**5) for m in alone]
    return out


@pytest.fixture
def archives(tmp_path: Path) -> tuple[Path, Path]:
    recorded = _recorded()
    rec = write_plain(tmp_path / "recorded.msgpack", recorded)
    header = {**HEADER, "source": "replay", "archives": [str(rec.resolve())]}
    rep = write_plain(tmp_path / "replayed.msgpack", _replayed(recorded), header)
    return rec, rep


def _report(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["report", *args])
    return result.exit_code, result.stdout, result.stderr


def _counts(rows: list[dict[str, Any]]) -> list[tuple[str, int | None, int]]:
    """(route, recorded requests or None without that side, replayed requests) a row."""
    return [
        (
            r["route"],
            r["recorded"]["requests"] if "recorded" in r else None,
            r["replayed"]["requests"],
        )
        for r in rows
    ]


def test_the_json_has_a_row_per_route_most_requests_first(
    archives: tuple[Path, Path], tmp_path: Path
) -> None:
    _, rep = archives
    out = tmp_path / "r.json"
    code, _, err = _report(str(rep), "--json", str(out))
    assert code == 0, err
    report = json.loads(out.read_text())
    # The recorded side holds what the replay sent (no embeddings); completions had no
    # original: a route on the replayed side only, counted there under its own path.
    assert _counts(report["routes"]) == [
        (CHAT, 6, 6),
        (MESSAGES, 4, 4),
        ("other", 2, 2),
        (COMPLETIONS, 0, 3),
    ]
    assert list(report).index("routes") == list(report).index("buckets") + 1
    by_route = {r["route"]: r for r in report["routes"]}
    assert by_route[MESSAGES]["replayed"]["error_rate"] == 0.25
    assert by_route[MESSAGES]["recorded"]["error_rate"] == 0.0
    chat = by_route[CHAT]
    recorded_ms = np.array([100 + 10 * i for i in range(6)], dtype=float)
    replayed_ms = np.array([50.0, *(2 * recorded_ms[1:])])
    for side, values in (("recorded", recorded_ms), ("replayed", replayed_ms)):
        got = chat[side]["metrics"]["latency"]["p99"]["value"]
        assert got == pytest.approx(np.percentile(values, 99))
        ttft = chat[side]["metrics"]["ttft"]["p50"]["value"]
        assert ttft == pytest.approx(np.percentile(values / 4, 50))
    # The routes split the requests: their counts add up to the overall's.
    for side in ("recorded", "replayed"):
        total = sum(r[side]["requests"] for r in report["routes"])
        assert total == report["overall"][side]["requests"]


def test_a_route_on_the_recorded_side_only_has_a_row(archives: tuple[Path, Path]) -> None:
    """Compared whole (the library call), the embeddings nobody replayed keep their row."""
    rec, rep = archives
    report = compare(load_side([rec]), load_side([rep]))
    rows = {r["route"]: r for r in report["routes"]}
    assert rows["/v1/embeddings"]["recorded"]["requests"] == 2
    assert rows["/v1/embeddings"]["replayed"]["requests"] == 0
    assert rows["/v1/embeddings"]["replayed"]["metrics"]["latency"] is None


def test_the_tables_show_by_route_beside_the_buckets(
    archives: tuple[Path, Path], tmp_path: Path
) -> None:
    _, rep = archives
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    code, out, err = _report(str(rep), "--markdown", str(md), "--html", str(html))
    assert code == 0, err
    text = md.read_text()
    assert "## By route" in text
    assert text.index("## latency by input length") < text.index("## By route")
    head = "| route | side | requests | errors | latency P50 ms | latency P99 ms | TTFT P50 ms |"
    assert head in text
    assert "| /v1/messages | recorded | 4 | 0.00% |" in text
    assert "|   | replayed | 4 | 25.00% |" in text
    assert "| /v1/completions | recorded | 0 | - | - | - | - | - |" in text
    assert "By route" in out and "/v1/completions" in out
    assert "<h2>By route</h2>" in html.read_text()


def test_one_route_is_in_the_json_alone(tmp_path: Path) -> None:
    maps = [_original(i, CHAT, "llama", 100) for i in range(5)]
    capture = write_plain(tmp_path / "capture.msgpack", maps)
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    code, text, err = _report(str(capture), "--json", str(out), "--markdown", str(md))
    assert code == 0, err
    assert _counts(json.loads(out.read_text())["routes"]) == [(CHAT, None, 5)]
    assert "By route" not in md.read_text() and "By route" not in text


def test_the_deltas_csv_names_the_originals_path_and_model_safely(
    archives: tuple[Path, Path], tmp_path: Path
) -> None:
    _, rep = archives
    out = tmp_path / "deltas.csv"
    code, _, err = _report(str(rep), "--deltas", str(out))
    assert code == 0, err
    text = out.read_text()
    header, *rows = list(csv.reader(text.splitlines()))
    assert tuple(header) == DELTA_COLUMNS
    assert header[:5] == ["trace_id", "span_id", "path", "model", "input_tokens"]
    # One row a line: no value from a client ends a row.
    assert len(rows) == 12 == len(text.splitlines()) - 1
    got = {(int(r[0][:2], 16) - 1): dict(zip(header, r, strict=True)) for r in rows}
    # The original's path (without its query) and model, not the replay's; none: empty.
    assert (got[0]["path"], got[0]["model"]) == (CHAT, "llama")
    assert (got[1]["path"], got[1]["model"]) == (CHAT, "")
    # Commas and quotes round-trip through the CSV quoting; a leading =, + , - or @ is
    # behind a ', so a spreadsheet shows it as text; control characters are escaped.
    assert (got[6]["path"], got[6]["model"]) == (MESSAGES, "'" + FORMULA_MODEL)
    assert (got[2]["model"], got[7]["model"]) == ("'+cmd", "'@SUM(A1)")
    assert (got[10]["path"], got[10]["model"]) == ('/v1/x,"b"', "'-2+3")
    assert (got[11]["path"], got[11]["model"]) == (OTHER, 'm\\n=cmd,"q"\\r')
    assert '"/v1/x,""b"""' in text  # quoted as CSV quotes
    for row in got.values():
        assert not {row["path"][:1], row["model"][:1]} & {"=", "+", "-", "@"}
    # Numbers keep their sign: the one faster replay's delta is negative, unprefixed.
    assert float(got[0]["delta_ms"]) == pytest.approx(50 - 100)
    assert got[1]["delta_ms"] == f"{110:.3f}"


def test_each_distinct_path_is_labelled_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    maps = [_original(i % 250, [CHAT, MESSAGES][i % 2], "m", 100) for i in range(2000)]
    maps += [_original(1, f"{CHAT}?request={i}", "m", 100) for i in range(500)]
    side = load_side([write_plain(tmp_path / "many.msgpack", maps)])
    assert side.labels["path"] == [CHAT, MESSAGES]
    calls: list[str | None] = []

    def counting(path: str | None) -> str:
        calls.append(path)
        return real(path)

    real = routes.route_label
    monkeypatch.setattr(routes, "route_label", counting)
    rows = routes.route_masks(None, side, None)
    assert sorted(calls) == sorted([CHAT, MESSAGES])  # queries stripped once, at the read
    assert [(route, int(m["replayed"].sum())) for route, m in rows] == [
        (CHAT, 1500),
        (MESSAGES, 1000),
    ]


def test_a_path_that_is_no_request_target_never_reaches_the_csv(tmp_path: Path) -> None:
    """A newline cannot be in a path: the archive reader refuses the record (exit 3),
    or skips it with --skip-corrupt, and the CSV has one row a line."""
    recorded = [_original(i, CHAT, "llama", 100) for i in range(3)]
    recorded.append(_original(3, UNREADABLE, "llama", 100))
    rec = write_plain(tmp_path / "recorded.msgpack", recorded)
    rep = write_plain(
        tmp_path / "replayed.msgpack",
        [_replay_of(m, 2.0) for m in recorded],
        {**HEADER, "source": "replay"},
    )
    out = tmp_path / "deltas.csv"
    code, _, err = _report(str(rep), "--recorded", str(rec), "--deltas", str(out))
    assert code == 3 and "request target" in err
    code, _, err = _report(str(rep), "--recorded", str(rec), "--deltas", str(out), "--skip-corrupt")
    assert code == 0, err
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and all(",/v1/chat/completions,llama," in line for line in lines[1:])
