"""``tailreplay report``: figures checked against numpy on known archives, the SLO gate's
exit codes, the files it writes, and a report straight after a real replay."""

from __future__ import annotations

import csv
import json
import os
import random
import re
import stat
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.report.quantiles import estimates
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.results.log_histogram import LogHistogram
from tests.helpers import HEADER, write_plain

T0 = 1_700_000_000 * 10**9
N = 1000


def _pair(tmp_path: Path, factor: float = 2.0) -> tuple[Path, Path, list[dict], list[dict]]:
    """A recorded archive and a replay of it where every request took ``factor`` times as long.

    The replay's target counts prompt tokens 10% higher (another tokenizer), so bucketing
    by the replayed side's own counts would move requests across bucket edges.
    """
    rng = random.Random(3)
    recorded, replayed = [], []
    for i in range(N):
        trace, span = rng.randbytes(16), rng.randbytes(8)
        tokens = rng.choice([30, 200, 255, 300, 900, 3000])
        duration = (i + 1) * 10**6  # 1..1000 ms
        ttfb = duration // 4
        recorded.append(
            {
                "start_ns": T0 + i * 10**7, "trace_id": trace, "span_id": span, "status": 200,
                "stream": True, "input_tokens": tokens, "output_tokens": 11,
                "duration_ns": duration, "ttfb_ns": ttfb, "chunk_gaps_us": [1000] * 10,
            }
        )  # fmt: skip
        failed = i % 100 == 0  # 1% errors in the replay
        replayed.append(
            {
                "start_ns": T0 + 10**12 + i * 5 * 10**6, "trace_id": trace,
                "span_id": rng.randbytes(8), "orig_trace_id": trace, "orig_span_id": span,
                "status": 500 if failed else 200, "stream": True,
                "input_tokens": round(tokens * 1.1), "output_tokens": 11,
                "duration_ns": round(duration * factor), "ttfb_ns": round(ttfb * factor),
                "chunk_gaps_us": [2000] * 10, "lag_ns": 5 * 10**5, "tail": i >= 990,
                **({"error": "http_500"} if failed else {}),
            }
        )  # fmt: skip
    rec = write_plain(tmp_path / "recorded.msgpack", recorded)
    header = {**HEADER, "source": "replay", "speed": "2x", "archives": [str(rec.resolve())]}
    rep = write_plain(tmp_path / "replayed.msgpack", replayed, header)
    return rec, rep, recorded, replayed


def _report(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["report", *args])
    return result.exit_code, result.stdout, result.stderr


def _json(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    code, _, err = _report(*args, "--json", str(out))
    assert code == 0, err
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_figures_match_numpy_and_requests_keep_their_recorded_bucket(tmp_path: Path) -> None:
    rec, rep, recorded, replayed = _pair(tmp_path)
    report = _json(tmp_path, str(rep))  # the recorded side comes from the replay's header
    assert report["inputs"]["recorded"] == [str(rec)]
    r, p = report["overall"]["recorded"], report["overall"]["replayed"]
    assert r["requests"] == p["requests"] == N
    assert (r["errors"], p["errors"], p["tail"]) == (0, 10, 10)
    ok = [m for m in replayed if "error" not in m]
    for side, maps in (("recorded", recorded), ("replayed", ok)):
        lat = np.array([m["duration_ns"] for m in maps]) / 1e6
        got = report["overall"][side]["metrics"]["latency"]
        for q, pct in (("p50", 50), ("p99", 99), ("p999", 99.9)):
            assert got[q]["value"] == pytest.approx(np.percentile(lat, pct))
            assert got[q]["low"] <= got[q]["value"] <= got[q]["high"]
    due = report["overall"]["replayed"]["metrics"]["latency_from_due"]
    assert due["p50"]["value"] == pytest.approx(p["metrics"]["latency"]["p50"]["value"] + 0.5)
    assert "latency_from_due" not in r["metrics"]  # a capture has no schedule
    assert p["metrics"]["itl"]["p50"]["value"] == pytest.approx(2.0, rel=0.01)
    # Successes over each side's window, first start to last end: the recording spans
    # 9.99 s + the last request's 1 s, the replay (2x) 4.995 s + 2 s.
    assert r["throughput_rps"] == pytest.approx(1000 / 10.99)
    assert p["throughput_rps"] == pytest.approx(990 / 6.995)

    buckets = {b["range"]: b for b in report["buckets"]}
    for lo, hi in ((None, 50), (50, 256), (256, 512), (512, 1024), (2048, None)):
        label = f"<{hi}" if lo is None else (f">={lo}" if hi is None else f"{lo}-{hi}")
        want = sum(1 for m in recorded if (lo or 0) <= m["input_tokens"] < (hi or 10**9))
        assert buckets[label]["recorded"]["requests"] == want
        assert buckets[label]["replayed"]["requests"] == want  # 255 * 1.1 stays in 50-256

    d = report["deltas"]
    assert (d["joined"], d["unmatched"], d["compared"]) == (N, 0, N - 10)
    assert d["latency_ratio"]["p50"] == pytest.approx(2.0)
    assert d["slower_share"] == 1.0
    assert d["worst"][0]["recorded_ms"] == pytest.approx(1000.0)  # i = 999 (not an error)
    assert d["worst"][0]["replayed_ms"] == pytest.approx(2000.0) and d["worst"][0]["tail"]


def test_slo_gate_exit_codes_and_score(tmp_path: Path) -> None:
    _, rep, _, _ = _pair(tmp_path)
    # Replayed P50 ~1,000 ms, P99 ~1,980 ms, errors 1%.
    code, out, err = _report(str(rep), "--slo", "latency:p50<=1.2s*1,latency:p99<=1.5s*10")
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "Error: SLO failed: score 0.09 < 1.00 (missed: latency:p99<=1.5s*10)"
    )
    assert "SLO FAIL" in out
    code, _, err = _report(
        str(rep), "--slo", "latency:p50<=1.2s*1,latency:p99<=1.5s*10", "--slo-min-score", "0.05"
    )
    assert code == 0, err
    # Relative to the recording: 2x slower passes 2.1x and misses 1.9x.
    assert _report(str(rep), "--slo", "latency:p99<=2.1x")[0] == 0
    assert _report(str(rep), "--slo", "latency:p99<=1.9x")[0] == 1
    assert _report(str(rep), "--slo", "error_rate<=1%")[0] == 0
    assert _report(str(rep), "--slo", "error_rate<=0.5%")[0] == 1
    report = _json(tmp_path, str(rep), "--slo", "ttft:p95<=600ms*3")  # P95 TTFT is 475 ms
    row = report["slo"]["rows"][0]
    assert row["cells"]["overall"]["ok"] is True and row["weight"] == 3
    assert set(row["cells"]) == {"overall", *(b["range"] for b in report["buckets"])}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slo", "latency<=80ms"], "name a percentile"),
        (["--slo", "latncy:p99<=80ms"], "unknown metric 'latncy'"),
        (["--slo", "latency:p99<=fast"], "the limit is a duration or a factor"),
        # A bare number is refused where it could mean two things: seconds or
        # milliseconds; a fraction (1 = 100%: a gate that cannot fail) or percent.
        (["--slo", "latency:p99<=2"], "give the limit a unit (2ms or 2s) or make it relative"),
        (["--slo", "error_rate<=1"], "give the error rate in percent, e.g. error_rate<=1%"),
        (["--slo", "error_rate<=0.01"], "error_rate<=1% for a share of 0.01, or error_rate<=0.01%"),
        (["--slo", "error_rate<=150%"], "an error rate is at most 100%"),
        (["--slo", "latency:p99<=1.2x", "--replay-only"], "needs the recorded archive"),
        (["--buckets", "a,b"], "invalid --buckets"),
        (["--buckets", ","], "no edge"),
        (["--buckets", "512,50"], "must ascend"),
        (["--buckets", "50,50"], "must ascend"),
        (["--buckets", "99999999999"], "under 2^32"),
        (["--buckets", "1_000"], "invalid --buckets"),
        (["--buckets", "\u0663"], "invalid --buckets"),
        (["--json", "/nonexistent/dir/r.json"], "no such directory"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    _, rep, _, _ = _pair(tmp_path)
    code, _, err = _report(str(rep), *args)
    assert code == 2, err
    assert message in err and "Traceback" not in err


def test_a_relative_slo_the_recording_cannot_judge_exits_2_as_in_replay(tmp_path: Path) -> None:
    """``replay`` refuses it before sending (exit 2); ``report`` on the results refuses it
    the same way rather than score it missed (exit 1)."""
    rec, rep, recorded, _ = _pair(tmp_path)
    write_plain(rec, [{k: v for k, v in m.items() if k != "ttfb_ns"} for m in recorded])
    code, _, err = _report(str(rep), "--slo", "latency:p99<=2.1x,ttft:p95<=1.2x*3")
    assert code == 2, err
    assert err.strip().splitlines()[-1] == (
        "Error: --slo 'ttft:p95<=1.2x*3': relative to the recording, but the archive records "
        "no ttft (ttfb_ns is absent from all 1,000 records); give an absolute limit instead "
        "(e.g. 800ms)"
    )
    assert _report(str(rep), "--slo", "latency:p99<=2.1x")[0] == 0  # what it has is judged


def test_equal_values_get_equal_intervals(tmp_path: Path) -> None:
    """With no dispatch lag, latency from due is latency: the same figures, and the same
    bootstrap intervals (one set of draws for every metric of a side)."""
    rec, rep, _, replayed = _pair(tmp_path)
    header = {**HEADER, "source": "replay", "speed": "2x", "archives": [str(rec.resolve())]}
    write_plain(rep, [{**m, "lag_ns": 0} for m in replayed], header)
    metrics = _json(tmp_path, str(rep))["overall"]["replayed"]["metrics"]
    assert metrics["latency_from_due"] == metrics["latency"]
    assert metrics["latency"]["p99"]["low"] < metrics["latency"]["p99"]["high"]


def test_a_damaged_archive_exits_3(tmp_path: Path) -> None:
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(b"not an archive at all")
    code, _, err = _report(str(bad))
    assert code == 3 and len(err.strip().splitlines()) == 1, err
    typed = write_plain(tmp_path / "typed.msgpack", [{"start_ns": T0, "duration_ns": "slow"}])
    code, _, err = _report(str(typed))
    assert code == 3 and len(err.strip().splitlines()) == 1, err
    assert f"{typed}: corrupt archive at byte offset" in err
    assert "record 1: 'duration_ns' must be an int" in err


def test_a_missing_recorded_archive_gives_a_replay_only_report(tmp_path: Path) -> None:
    rec, rep, _, _ = _pair(tmp_path)
    rec.unlink()
    out = tmp_path / "r.json"
    code, _, err = _report(str(rep), "--json", str(out))
    assert code == 0, err
    assert f"the recorded archive {rec} is gone" in err
    report = json.loads(out.read_text())
    assert list(report["overall"]) == ["replayed"] and report["deltas"] is None


def test_a_capture_reported_alone_names_its_figures_recorded(tmp_path: Path) -> None:
    """An archive that is not a replay's results (here, the proxy's capture) is what was
    recorded: the text, Markdown and HTML say so, with no note asking for --recorded;
    the JSON keeps its figures under ``replayed`` and names the archive's source."""
    _, _, recorded, _ = _pair(tmp_path)
    capture = write_plain(tmp_path / "capture.msgpack", recorded, {**HEADER, "source": "proxy"})
    paths = {ext: tmp_path / f"c.{ext}" for ext in ("json", "md", "html")}
    code, out, err = _report(str(capture), "--slo", "latency:p99<=3s", "--json",
                             str(paths["json"]), "--markdown", str(paths["md"]), "--html",
                             str(paths["html"]))  # fmt: skip
    assert code == 0, err
    assert out.startswith(f"recorded {N:,} requests, errors 0.00%")
    assert "--recorded" not in err and "replayed" not in out
    md = paths["md"].read_text()
    assert "| latency ms | recorded |" in md and "| objective | weight | recorded ms |" in md
    html = paths["html"].read_text()
    assert "recorded P99" in html and "replayed" not in html
    report = json.loads(paths["json"].read_text())
    assert list(report["overall"]) == ["replayed"] and report["replay"]["source"] == "proxy"


@pytest.mark.parametrize("header", [{"source": "merge"}, {}], ids=["merged", "no-source"])
def test_replay_results_merged_or_without_a_source_are_still_a_replay(
    tmp_path: Path, header: dict[str, Any]
) -> None:
    """Shards merged by ``traces merge`` (or results whose header names no source) carry
    their dispatch lags: they are a replay's results, named so, with a client verdict."""
    _, _, _, replayed = _pair(tmp_path)
    base = {k: v for k, v in HEADER.items() if k != "source"}
    results = write_plain(tmp_path / "merged.msgpack", replayed, {**base, **header})
    code, out, err = _report(str(results), "--replay-only")
    assert code == 0, err
    assert out.startswith(f"replayed {N:,} requests") and "| recorded" not in out
    assert _json(tmp_path, str(results), "--replay-only")["client"] is not None


def test_files_are_private_and_hold_the_report(tmp_path: Path) -> None:
    _, rep, _, replayed = _pair(tmp_path)
    paths = {ext: tmp_path / f"r.{ext}" for ext in ("json", "md", "html", "csv")}
    code, _, err = _report(
        str(rep), "--slo", "latency:p99<=3s", "--json", str(paths["json"]),
        "--markdown", str(paths["md"]), "--html", str(paths["html"]),
        "--deltas", str(paths["csv"]),
    )  # fmt: skip
    assert code == 0, err
    for path in paths.values():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    md = paths["md"].read_text()
    assert "## SLOs: score 1.00 (PASS)" in md and "| latency ms | replayed |" in md
    html = paths["html"].read_text()
    assert html.count("<svg") == 4 and "SLO matrix" in html and "<script" not in html
    for svg in re.findall(r"<svg.*?</svg>", html, re.S):
        assert ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}polyline")  # well-formed
    rows = list(csv.DictReader(paths["csv"].open()))
    assert len(rows) == N
    by_trace = {m["orig_trace_id"].hex(): m for m in replayed}
    for row in rows[:50]:
        m = by_trace[row["trace_id"]]
        if "error" in m:
            assert row["delta_ms"] == "" and row["replayed_error"] == "1"
        else:
            assert float(row["delta_ms"]) == pytest.approx(m["duration_ns"] / 2e6, abs=1e-3)
        assert row["replayed_output_tokens"] == str(m.get("output_tokens", ""))


def test_a_partial_replay_is_compared_with_the_requests_it_sent(tmp_path: Path) -> None:
    rec, _, recorded, replayed = _pair(tmp_path)
    part = write_plain(tmp_path / "part.msgpack", replayed[:300], {**HEADER, "source": "replay"})
    report = _json(tmp_path, str(part), "--recorded", str(rec))
    assert report["overall"]["recorded"]["requests"] == 300
    lat = np.array([m["duration_ns"] for m in recorded[:300]]) / 1e6
    got = report["overall"]["recorded"]["metrics"]["latency"]["p99"]["value"]
    assert got == pytest.approx(np.percentile(lat, 99))
    # A replay of another recording joins nothing: the two are compared whole.
    strangers = [{**m, "trace_id": bytes(16), "span_id": bytes([i]) * 8}
                 for i, m in enumerate(recorded[:10])]  # fmt: skip
    other = write_plain(tmp_path / "other.msgpack", strangers)
    code, _, err = _report(str(other), "--recorded", str(rec), "--json", str(tmp_path / "o.json"))
    assert code == 0 and "comparing them whole" in err
    assert json.loads((tmp_path / "o.json").read_text())["overall"]["recorded"]["requests"] == N


def test_a_relative_slo_against_a_recording_the_replay_did_not_come_from_is_not_judged(
    tmp_path: Path,
) -> None:
    """The replay's requests came from a recording, but none of them is in the archive
    given (it was replaced, or sliced anew): percentiles relative to it compare two
    unrelated runs, so the gate says why and exits 4, whatever the figures."""
    rec, _, recorded, replayed = _pair(tmp_path, factor=1.0)
    strangers = [{**m, "trace_id": bytes([i % 256, 1]) * 8} for i, m in enumerate(recorded)]
    other = write_plain(tmp_path / "other.msgpack", strangers)
    run = write_plain(tmp_path / "run.msgpack", replayed, {**HEADER, "source": "replay"})
    out = tmp_path / "r.json"
    code, stdout, err = _report(
        str(run), "--recorded", str(other), "--slo", "latency:p99<=1.2x", "--json", str(out)
    )
    assert code == 4, err
    verdict = json.loads(out.read_text())["verdict"]
    assert verdict["state"] == "not_judged"
    assert "no replayed request comes from the recorded archive" in verdict["reason"]
    # The headline says why, not a score over figures nobody may judge.
    headline = next(line for line in stdout.splitlines() if "SLO NOT JUDGED" in line)
    assert "SLO NOT JUDGED: no replayed request comes from" in headline
    assert "score" not in headline
    # The same replay against the recording it came from is judged.
    code, _, err = _report(str(run), "--recorded", str(rec), "--slo", "latency:p99<=1.2x")
    assert code == 0, err


def test_bootstrap_intervals_match_resampling_and_the_histogram_is_within_1pct() -> None:
    rng = np.random.default_rng(4)
    x = rng.lognormal(5, 1, 2000)
    got = estimates(x, rng=np.random.default_rng(1), draws=4000)
    assert got is not None
    brute = np.array([np.percentile(rng.choice(x, x.size), [50, 99]) for _ in range(2000)])
    lo, hi = np.percentile(brute, [2.5, 97.5], axis=0)
    for i, q in enumerate(("p50", "p99")):
        width = hi[i] - lo[i]
        assert got[q].low == pytest.approx(lo[i], abs=0.1 * width)
        assert got[q].high == pytest.approx(hi[i], abs=0.1 * width)
    # The histogram: within its 1% bins of the exact percentiles of a long series
    # (gaps of 0, chunks read together, included).
    gaps = np.concatenate([rng.lognormal(3, 1, 200_000).round(), np.zeros(5000)])
    h = LogHistogram()
    for part in np.array_split(gaps, 7):
        h.add(part)
    for q, est in (h.percentiles() or {}).items():
        exact = np.percentile(gaps, {"p50": 50, "p95": 95, "p99": 99, "p999": 99.9}[q])
        assert est == pytest.approx(exact, rel=0.011), q


def test_report_after_a_real_replay_finds_the_recording_and_joins_every_request(
    tmp_path: Path,
) -> None:
    rng = random.Random(8)
    maps = [
        {
            "start_ns": T0 + i * 2 * 10**7, "trace_id": rng.randbytes(16),
            "span_id": rng.randbytes(8), "method": "POST", "path": "/v1/chat/completions",
            "model": "m", "stream": i % 2 == 0, "status": 200,
            "input_tokens": rng.randint(20, 3000), "output_tokens": rng.randint(2, 8),
            "duration_ns": rng.randint(10**8, 10**9), "ttfb_ns": 5 * 10**7,
        }
        for i in range(200)
    ]  # fmt: skip
    archive = write_plain(tmp_path / "a.msgpack", maps)
    out = tmp_path / "r.msgpack"
    md = tmp_path / "r.md"
    with sim_process(["--profile", "fast"]) as sim:
        result = CliRunner().invoke(
            cli,
            [
                "replay", str(archive), "--target", sim, "--out", str(out), "--speed", "4x",
                "--report", str(md), "--slo", "ttft:p99<=1us",
                "--lag-limit", "1s",  # the gate, not this machine's load, is under test
            ],
        )  # fmt: skip
    # The run went fine; the objective (no TTFT is under a microsecond) did not.
    assert result.exit_code == 1, result.stderr
    assert "Error: SLO failed: score 0.00 < 1.00 (missed: ttft:p99<=1us)" in result.stderr
    assert f"report: {md}" in result.stdout and f"results: {out}" in result.stdout
    assert "## SLOs: score 0.00 (FAIL)" in md.read_text()
    report = _json(tmp_path, str(out), "--slo", "ttft:p99<=10s")
    assert report["overall"]["replayed"]["requests"] == 200
    assert report["deltas"]["joined"] == 200 and report["deltas"]["compared"] == 200
    assert report["replay"]["speed"] == "4x"
    assert report["slo"]["passed"]
    assert sum(b["replayed"]["requests"] for b in report["buckets"]) == 200


def test_tables_piped_to_a_file_are_not_wrapped_inside_cells(tmp_path: Path) -> None:
    import subprocess
    import sys

    _, rep, _, _ = _pair(tmp_path)
    objectives = "latency:p50<=1.2s*1,latency:p99<=1.5s*10,ttft:p95<=600ms*3,error_rate<=1%"
    with open(tmp_path / "report.txt", "w") as out:  # a file: no terminal, no width
        subprocess.run(
            [sys.executable, "-m", "tailreplay", "report", str(rep), "--slo", objectives],
            stdout=out, stderr=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "40"},
        )  # fmt: skip
    text = (tmp_path / "report.txt").read_text()
    lines = text.splitlines()
    # Every objective and every trace id sits whole on one line of its table.
    for objective in objectives.split(","):
        assert any(f"│ {objective} " in line for line in lines), objective
    trace_ids = re.findall(r"│ ([0-9a-f]{32}) │", text)
    assert len(trace_ids) == 20  # the largest slow-downs, with and without the tail
    assert "the score is the weight met overall over the weight of all; buckets are shown" in text


def test_the_deltas_csv_counts_a_cancelled_request_as_every_view_does(tmp_path: Path) -> None:
    """Cut by the client: not the target's error and in no figure, as in the summary,
    the report's tables and ``traces stats``."""
    rec, _, _, replayed = _pair(tmp_path)
    replayed[5] = {**replayed[5], "status": 0, "error": "cancelled"}
    header = {**HEADER, "source": "replay", "speed": "2x", "archives": [str(rec.resolve())]}
    rep = write_plain(tmp_path / "cut.msgpack", replayed, header)
    code, _, err = _report(str(rep), "--deltas", str(tmp_path / "d.csv"))
    assert code == 0, err
    rows = {r["trace_id"]: r for r in csv.DictReader((tmp_path / "d.csv").open())}
    cut = rows[replayed[5]["orig_trace_id"].hex()]
    assert (cut["replayed_error"], cut["replayed_cancelled"], cut["replayed_ms"]) == ("0", "1", "")
    failed = rows[replayed[100]["orig_trace_id"].hex()]  # a 500: the target's error
    assert (failed["replayed_error"], failed["replayed_cancelled"]) == ("1", "0")
