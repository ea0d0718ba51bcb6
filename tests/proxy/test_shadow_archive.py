"""A capture made with ``proxy --shadow`` holds production's records and the shadow's
copies side by side. Every figure of the capture is production's (the copies are
left out of stats, replays, fits and exports), and ``report --shadow`` compares the
two request for request."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import write_plain
from tests.shadow_helpers import HEADER, T0, shadowed_capture


def _json(*args: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(cli, list(args))
    document = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.exit_code, document, result.stderr


def test_every_figure_of_a_shadowed_capture_is_productions(tmp_path: Path) -> None:
    capture = shadowed_capture(tmp_path / "c.msgpack")
    code, stats, _ = _json("traces", "stats", str(capture), "--json")
    assert code == 0 and stats["records"] == 400 and stats["shadow_copies"] == 100
    assert stats["latency_ms"]["p999"] <= 400 and stats["error_rate"] == 0
    assert len(list(ArchiveReader([capture]))) == 400
    assert len(list(ArchiveReader([capture], shadows="only"))) == 100
    assert len(list(ArchiveReader([capture], shadows="keep"))) == 500
    dry = tmp_path / "dry.msgpack"
    result = CliRunner().invoke(cli, ["replay", "--dry-run", "-o", str(dry), str(capture)])
    assert result.exit_code == 0, result.output
    assert len(list(ArchiveReader([dry]))) == 400  # the copies are not replayed again
    sliced = tmp_path / "s.msgpack"
    result = CliRunner().invoke(cli, ["traces", "slice", str(capture), "-o", str(sliced)])
    assert result.exit_code == 0, result.output
    assert len(list(ArchiveReader([sliced], shadows="only"))) == 100  # kept whole
    shown = CliRunner().invoke(cli, ["traces", "stats", str(capture)])
    assert "shadow copies 100: in no figure here" in shown.output
    report = CliRunner().invoke(cli, ["report", str(capture)])
    assert "report --shadow compares them with production" in report.stderr


def test_report_shadow_compares_the_copies_with_their_originals(tmp_path: Path) -> None:
    capture = shadowed_capture(tmp_path / "c.msgpack")
    out = tmp_path / "r.json"
    args = ["report", str(capture), "--shadow", "--json", str(out)]
    result = CliRunner().invoke(cli, [*args, "--slo", "latency:p99<=1.5x"])
    assert result.exit_code == 1, result.output  # the shadow is twice as slow: missed
    report = json.loads(out.read_text())
    assert report["shadow"] == {"target": "http://127.0.0.1:9000", "share": 0.25}
    production, shadow = report["overall"]["recorded"], report["overall"]["replayed"]
    assert production["requests"] == shadow["requests"] == 100  # the copied ones only
    assert (production["errors"], shadow["errors"]) == (0, 2)
    assert report["deltas"]["joined"] == 100
    assert report["deltas"]["latency_ratio"]["p50"] == pytest.approx(2.0, rel=0.01)
    assert "same_length" not in report["deltas"]  # every pair's answers are as long
    first = result.stdout.splitlines()[0]
    assert first.startswith("shadow at http://127.0.0.1:9000: 100 copied requests (25% of")
    assert (
        "against the same 100 as production answered them, errors: shadow 2.00%, production 0.00%"
        in first
    )
    run = result.output[: result.output.index("overview")]
    assert "http://127.0.0.1:9000" in run and "http://127.0.0.1:8000" in run
    assert "recorded" not in run and "replayed" not in run
    passed = CliRunner().invoke(cli, [*args, "--slo", "latency:p99<=2.5x"])
    assert passed.exit_code == 0, passed.output


def test_report_shadow_of_a_capture_without_copies_says_so(tmp_path: Path) -> None:
    plain = write_plain(
        tmp_path / "p.msgpack", [{"start_ns": T0, "method": "POST", "status": 200}], HEADER
    )
    result = CliRunner().invoke(cli, ["report", str(plain), "--shadow"])
    assert result.exit_code == 2
    assert "the capture holds no shadow copies" in result.stderr


def test_report_shadow_compares_pairs_only(tmp_path: Path) -> None:
    # A slice or --sample left some originals out: their copies are left out too.
    capture = shadowed_capture(tmp_path / "c.msgpack")
    maps = list(ArchiveReader([capture], shadows="keep").iter_maps())
    copied = {m["shadow_of"] for m in maps if "shadow_of" in m}
    dropped = set(list(copied)[:40])
    kept = [m for m in maps if m.get("span_id") not in dropped]
    sliced = write_plain(tmp_path / "s.msgpack", kept, HEADER)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["report", str(sliced), "--shadow", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["overall"]["recorded"]["requests"] == report["overall"]["replayed"]["requests"]
    assert report["overall"]["replayed"]["requests"] == 60
    assert "40 of 100 copied requests have no production record in these files" in result.stderr
    orphans = write_plain(tmp_path / "o.msgpack", [m for m in maps if "shadow_of" in m], HEADER)
    refused = CliRunner().invoke(cli, ["report", str(orphans), "--shadow"])
    assert refused.exit_code == 2
    assert "none of the 100 copies has its production record" in refused.stderr


def test_the_share_reads_as_given_and_a_bad_one_is_named(tmp_path: Path) -> None:
    header = {**HEADER, "capture": {"shadow": {"target": "http://s:1", "share": 0.005}}}
    maps = list(
        ArchiveReader([shadowed_capture(tmp_path / "c.msgpack")], shadows="keep").iter_maps()
    )
    small = write_plain(tmp_path / "small.msgpack", maps, header)
    result = CliRunner().invoke(cli, ["report", str(small), "--shadow"])
    # Copies made at 25% under a header that says 0.5%: the header's share reads as
    # given, and the share the copies are of is what the first line puts first.
    assert (
        "(25% of production's generating requests, so about that share of its load; 0.5% asked"
        in result.stdout
    )
    assert "copies are of requests outside the header's share (0.5%)" in result.stderr
    for share in (float("nan"), 0, "10%", True):
        bad = {**HEADER, "capture": {"shadow": {"target": "http://s:1", "share": share}}}
        path = write_plain(tmp_path / "bad.msgpack", maps, bad)
        result = CliRunner().invoke(cli, ["traces", "stats", str(path)])
        assert result.exit_code == 3, result.output
        assert "capture.shadow.share must be a finite number over 0, at most 1" in result.stderr


def test_a_shadow_report_says_nothing_of_a_replay(tmp_path: Path) -> None:
    # Copies are sent as they came, on production's clock: no tail stretch, no phases,
    # and a relative limit is relative to production.
    capture = shadowed_capture(tmp_path / "c.msgpack")
    args = ["report", str(capture), "--shadow", "--slo", "latency:p99<=2.5x"]
    result = CliRunner().invoke(cli, [*args, "--slo-by", "phase"])
    assert result.exit_code == 1
    assert "tail-stretched" not in result.output
    assert "SLO by phase: no request has a phase (phases are the steps or pulses" in result.stdout
    assert result.stderr.endswith(
        "by phase: no request has a phase (phases are the steps or pulses of a replay's --speed)\n"
    )
    maps = list(ArchiveReader([capture], shadows="keep").iter_maps())
    without_ttft = [{k: v for k, v in m.items() if k != "ttfb_ns"} for m in maps]
    bare = write_plain(tmp_path / "bare.msgpack", without_ttft, HEADER)
    refused = CliRunner().invoke(cli, ["report", str(bare), "--shadow", "--slo", "ttft:p99<=2x"])
    assert refused.exit_code == 2
    assert "relative to production, but the archive records no ttft" in refused.stderr


def test_answers_of_another_length_are_compared_apart(tmp_path: Path) -> None:
    # A shadow that writes longer answers is slower for it, whatever its speed: the
    # per-request rows are given again over the pairs whose answers are as long.
    original = shadowed_capture(tmp_path / "c.msgpack")
    maps = list(ArchiveReader([original], shadows="keep").iter_maps())
    longer = 0
    for m in maps:
        if "shadow_of" in m and m["status"] == 200 and longer < 30:
            m.update(output_tokens=80, duration_ns=2 * m["duration_ns"])  # 4x production
            longer += 1
    capture = write_plain(tmp_path / "longer.msgpack", maps, HEADER)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["report", str(capture), "--shadow", "--json", str(out)])
    assert result.exit_code == 0, result.output
    deltas = json.loads(out.read_text())["deltas"]
    assert deltas["compared"] == 98 and deltas["latency_ratio"]["p99"] == pytest.approx(4, rel=0.01)
    same = deltas["same_length"]
    assert same["compared"] == 68 and same["slower_share"] == 1
    assert same["latency_ratio"]["p50"] == pytest.approx(2, rel=0.01)
    assert same["latency_ratio"]["p99"] == pytest.approx(2, rel=0.01)
    assert "ratio, same length" in result.stdout
    words = " ".join(result.stdout.split())  # the terminal wraps a table's note
    assert "same length (as many output tokens on both sides): 68 pairs" in words


def _maps(tmp_path: Path) -> list[dict[str, Any]]:
    capture = shadowed_capture(tmp_path / "c.msgpack")
    return list(ArchiveReader([capture], shadows="keep").iter_maps())


def test_throttled_copies_are_left_out_with_their_originals(tmp_path: Path) -> None:
    # Read at the proxy's pace, not the shadow's: neither an error nor a timing.
    maps = _maps(tmp_path)
    copies = [m for m in maps if "shadow_of" in m and m["status"] == 200]
    for m in copies[:10]:
        m.update(error="shadow_throttled", duration_ns=100 * m["duration_ns"])
    capture = write_plain(tmp_path / "t.msgpack", maps, HEADER)
    out = tmp_path / "r.json"
    args = ["report", str(capture), "--shadow", "--json", str(out), "--slo", "error_rate<=5%"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "warning: 10 copies were read slower than the shadow sent them" in result.stderr
    report = json.loads(out.read_text())
    overall = report["overall"]
    assert overall["recorded"]["requests"] == overall["replayed"]["requests"] == 90
    assert overall["replayed"]["errors"] == 2  # the two 500s, not the throttled copies
    assert report["deltas"]["latency_ratio"]["p99"] == pytest.approx(2, rel=0.01)


def test_copies_to_different_shadows_are_not_one_report(tmp_path: Path) -> None:
    maps = _maps(tmp_path)
    first = write_plain(tmp_path / "a.msgpack", maps, HEADER)
    other = {**HEADER, "capture": {"shadow": {"target": "http://127.0.0.1:9001", "share": 1.0}}}
    second = write_plain(tmp_path / "b.msgpack", maps, other)
    result = CliRunner().invoke(cli, ["report", str(first), str(second), "--shadow"])
    assert result.exit_code == 2
    assert (
        "these captures copied to different shadows or shares (http://127.0.0.1:9000 at 25%, "
        "http://127.0.0.1:9001 at 100%): report each apart"
    ) in result.stderr
    twice = CliRunner().invoke(cli, ["report", str(first), str(first), "--shadow"])
    assert "warning: 100 copies repeat a request already copied" in twice.stderr


def test_a_renamed_model_is_judged_against_its_original(tmp_path: Path) -> None:
    # --shadow-model-map a=a-fp8: the copies name a-fp8, but answer production's a.
    maps = _maps(tmp_path)
    originals = {m["span_id"]: m for m in maps if "shadow_of" not in m}
    for m in originals.values():
        m["model"] = "a" if m["input_tokens"] == 100 else "b"
        if m["model"] == "b":  # ten times as slow as a, in production
            m.update(ttfb_ns=10 * m["ttfb_ns"], duration_ns=10 * m["duration_ns"])
    for m in maps:
        if "shadow_of" in m:
            original = originals[m["shadow_of"]]
            m["model"] = original["model"] + "-fp8"
            m.update(ttfb_ns=2 * original["ttfb_ns"], duration_ns=2 * original["duration_ns"])
    capture = write_plain(tmp_path / "m.msgpack", maps, HEADER)
    args = ["report", str(capture), "--shadow", "--slo", "ttft:p99<=1.5x", "--slo-by", "model"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    # Each model missed against its own original's TTFT, not against all of production.
    missed = result.stderr.rstrip().rsplit("by model: ", 1)[1]
    assert sorted(missed.split(", ")) == ["model=a", "model=b"], result.stderr


def test_copies_the_proxy_did_not_send_are_counted_against_the_share(tmp_path: Path) -> None:
    # The shadow was down for a while: 30 of the requests the share picked (by trace
    # id, as the proxy picks) have no copy. The shadow saw 70 of 400, not 25%.
    maps = _maps(tmp_path)
    unsent = {m["shadow_of"] for m in maps if "shadow_of" in m and m["status"] == 200}
    unsent = set(sorted(unsent)[:30])
    kept = [m for m in maps if m.get("shadow_of") not in unsent]
    capture = write_plain(tmp_path / "d.msgpack", kept, HEADER)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["report", str(capture), "--shadow", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert (
        "warning: 30 of the 100 requests the share picked were not copied (the shadow was "
        "down, or had --shadow-max-inflight copies in flight)\n"
        "warning: the shadow saw 17.5% of production's generating requests (of 400 it "
        "could have been sent)\n"
    ) in result.stderr
    assert result.stdout.startswith(
        "shadow at http://127.0.0.1:9000: 70 copied requests (17.5% of production's "
        "generating requests, so about that share of its load; 25% asked; every figure"
    )
    report = json.loads(out.read_text())
    assert report["shadow"]["sent"] == 70 / 400 and report["shadow"]["share"] == 0.25
    assert any("were not copied" in w for w in report["warnings"])


def test_the_deltas_csv_gives_a_ttft_to_streamed_answers_only(tmp_path: Path) -> None:
    maps = _maps(tmp_path)
    for m in maps[::3]:
        m["stream"] = False
    capture = write_plain(tmp_path / "s.msgpack", maps, HEADER)
    out = tmp_path / "d.csv"
    result = CliRunner().invoke(cli, ["report", str(capture), "--shadow", "--deltas", str(out)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open()))
    streamed = {m["span_id"].hex(): m["stream"] for m in maps if "shadow_of" not in m}
    assert len(rows) == 100 and {streamed[r["span_id"]] for r in rows} == {True, False}
    for row in rows:
        assert (row["recorded_ttft_ms"] != "") == streamed[row["span_id"]]


def test_captures_of_different_shadows_are_not_merged_into_one(tmp_path: Path) -> None:
    maps = _maps(tmp_path)
    first = write_plain(tmp_path / "a.msgpack", maps, HEADER)
    other = {**HEADER, "capture": {"shadow": {"target": "http://127.0.0.1:9001", "share": 1.0}}}
    second = write_plain(tmp_path / "b.msgpack", maps, other)
    out = tmp_path / "m.msgpack"
    result = CliRunner().invoke(cli, ["traces", "merge", str(first), str(second), "-o", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert "the inputs copied to different shadows or shares" in result.stderr
    same = CliRunner().invoke(cli, ["traces", "merge", str(first), str(first), "-o", str(out)])
    assert same.exit_code == 0, same.output
    # A replica without a shadow beside one with, in either order; shares told apart.
    plain = write_plain(tmp_path / "p.msgpack", maps, {**HEADER, "capture": {"sample": 1.0}})
    near = {
        **HEADER,
        "capture": {"shadow": {"target": "http://127.0.0.1:9000", "share": 0.2500001}},
    }
    close = write_plain(tmp_path / "n.msgpack", maps, near)
    for pair, named in (
        ((plain, first), "http://127.0.0.1:9000 at 25%, no shadow"),
        ((first, plain), "http://127.0.0.1:9000 at 25%, no shadow"),
        ((first, close), "http://127.0.0.1:9000 at 25%, http://127.0.0.1:9000 at 25.00001%"),
    ):
        out.unlink(missing_ok=True)
        merged = CliRunner().invoke(cli, ["traces", "merge", *map(str, pair), "-o", str(out)])
        assert merged.exit_code == 2 and f"({named})" in merged.stderr, merged.stderr
        report = CliRunner().invoke(cli, ["report", *map(str, pair), "--shadow"])
        assert report.exit_code == 2 and f"({named}): report each apart" in report.stderr


def test_requests_the_proxy_would_not_copy_are_not_counted_missing(tmp_path: Path) -> None:
    # --sample 20% under a 25% share: a trace between the two was copied, but the copy
    # sampled out; its original is in the capture only when kept for being an error.
    # And a POST to a route whose body the proxy does not hold is never copied.
    maps = [m for m in _maps(tmp_path) if m["trace_id"][0] < 0x33]  # the sample's 20%
    production = [m for m in maps if "shadow_of" not in m]
    errors = [
        {**m, "trace_id": bytes([0x38]) + m["trace_id"][1:], "status": 500, "error": "http_500"}
        for m in production[:10]
    ]
    rerank = [{**m, "span_id": bytes(8), "path": "/v1/rerank"} for m in production[:10]]
    header = {**HEADER, "capture": {**HEADER["capture"], "sample": 0.2}}
    capture = write_plain(tmp_path / "s.msgpack", maps + errors + rerank, header)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["report", str(capture), "--shadow", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "not copied" not in result.stderr and "outside" not in result.stderr, result.stderr
    assert "sent" not in json.loads(out.read_text())["shadow"]


def test_a_capture_whose_copies_were_all_throttled_says_so(tmp_path: Path) -> None:
    maps = _maps(tmp_path)
    for m in maps:
        if "shadow_of" in m:
            m["error"] = "shadow_throttled"
    capture = write_plain(tmp_path / "t.msgpack", maps, HEADER)
    result = CliRunner().invoke(cli, ["report", str(capture), "--shadow"])
    assert result.exit_code == 2
    assert "every one of the 100 copies was read slower than the shadow sent it" in result.stderr
    # Given twice, a capture with orphans still says how many copies lost their original.
    orphans = [m for m in _maps(tmp_path) if m.get("span_id") != maps[0]["span_id"]]
    path = write_plain(tmp_path / "o.msgpack", orphans, HEADER)
    twice = CliRunner().invoke(cli, ["report", str(path), str(path), "--shadow"])
    assert "1 of 100 copied requests have no production record" in twice.stderr


def test_the_warnings_are_in_every_view(tmp_path: Path) -> None:
    maps = _maps(tmp_path)
    unsent = sorted({m["shadow_of"] for m in maps if "shadow_of" in m})[:5]
    capture = write_plain(
        tmp_path / "w.msgpack", [m for m in maps if m.get("shadow_of") not in unsent], HEADER
    )
    views = {suffix: tmp_path / f"r.{suffix}" for suffix in ("json", "md", "html")}
    args = ["report", str(capture), "--shadow", "--json", str(views["json"])]
    args += ["--markdown", str(views["md"]), "--html", str(views["html"])]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    said = "5 of the 100 requests the share picked were not copied"
    assert f"warning: {said}" in result.stderr
    assert any(w.startswith(said) for w in json.loads(views["json"].read_text())["warnings"])
    assert f"- warning: {said}" in views["md"].read_text()
    assert f"<li>warning: {said}" in views["html"].read_text()
