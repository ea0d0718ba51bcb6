"""The target's own metrics: pages read into common names, scraped during a real
replay of the simulator, and the findings the report draws from them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import stat
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.engine_metrics import MAX_RAW, read_page, scrape_path
from tailreplay.replayer.scrape import ScrapeTarget, scraping
from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tests.helpers import write_plain

T0 = 1_700_000_000 * 10**9

VLLM = """\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 7.0
vllm:num_requests_waiting{model_name="b"} 5.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a"} 0.5
vllm:kv_cache_usage_perc{model_name="b"} 0.7
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="a"} 0.1
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{model_name="a"} 4.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="a"} 30.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="a"} 100.0
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="1.0"} 3.0
vllm:e2e_request_latency_seconds_count 3.0
vllm:e2e_request_latency_seconds_sum 1.5
"""


def test_a_vllm_page_reads_into_common_names_and_keeps_the_rest_raw() -> None:
    got = read_page(VLLM)
    assert got["waiting"] == 12 and got["running"] == 3  # summed over models
    assert got["kv_cache_usage"] == pytest.approx(0.6)  # the new name wins over gpu_
    assert got["preemptions"] == 4 and got["prefix_cache_hits"] == 30
    assert got["prefix_cache_queries"] == 100
    assert got["vllm:e2e_request_latency_seconds_count"] == 3  # raw, buckets left out
    assert not any(k.endswith("_bucket") or "_bucket{" in k for k in got)


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ("sglang:num_queue_reqs 9\nsglang:num_running_reqs 2\nsglang:token_usage 0.95\n"
         "sglang:cache_hit_rate 0.4\n",
         {"waiting": 9, "running": 2, "kv_cache_usage": 0.95, "prefix_cache_hit_rate": 0.4}),
        ("tgi_queue_size 4\ntgi_batch_current_size 16\n", {"waiting": 4, "running": 16}),
        ("llamacpp:requests_deferred 3\nllamacpp:requests_processing 1\n"
         "llamacpp:kv_cache_usage_ratio 0.25\n",
         {"waiting": 3, "running": 1, "kv_cache_usage": 0.25}),
        # As the server `make e2e-llama` builds writes it: counters typed with _total.
        ("# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 120\n"
         "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
         "llamacpp:prompt_tokens_cached_total 80\n"
         "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 4\n"
         "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n",
         {"waiting": 2, "running": 4, "prefix_cache_hits": 80,
          "llamacpp:prompt_tokens_total": 120}),
        ('DCGM_FI_DEV_FB_USED{gpu="0"} 1000\nDCGM_FI_DEV_FB_USED{gpu="1"} 3000\n'
         'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 50\nDCGM_FI_DEV_GPU_UTIL{gpu="1"} 100\n',
         {"gpu_memory_used_mib": 4000, "gpu_utilization": 0.75}),
    ],
)  # fmt: skip
def test_other_engines_read_into_the_same_names(page: str, expected: dict[str, float]) -> None:
    got = read_page(page)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value), name


def test_raw_series_are_bounded_and_bad_pages_refused() -> None:
    page = "".join(f'other_series{{i="{i}"}} {i}\n' for i in range(MAX_RAW + 100))
    assert len(read_page(page)) == MAX_RAW
    with pytest.raises(ValueError):
        read_page("<html>not metrics</html>\n")


def _steady(path: Path, rate: float, n: int, input_tokens: int, output_tokens: int) -> Path:
    """``n`` streamed chat requests evenly at ``rate`` per second, all alike in length."""
    rng = random.Random(2)
    maps = [{"start_ns": T0 + int(i / rate * 1e9), "trace_id": rng.randbytes(16),
             "span_id": rng.randbytes(8), "method": "POST", "path": "/v1/chat/completions",
             "model": "m", "stream": True, "input_tokens": input_tokens,
             "output_tokens": output_tokens} for i in range(n)]  # fmt: skip
    return write_plain(path, maps)


def _busy_archive(path: Path) -> Path:
    """60 req/s for 2 s of 3,000-token prompts: several times what 4 sequences serve,
    so the queue passes the finding's 50 waiting within a second or two."""
    return _steady(path, 60, 120, 3000, 30)


def test_a_replay_scrapes_the_target_and_the_report_finds_the_queue(tmp_path: Path) -> None:
    archive = _busy_archive(tmp_path / "busy.msgpack")
    out, report = tmp_path / "r.msgpack", tmp_path / "report.json"
    with sim_process(["--profile", "fast", "--max-num-seqs", "4", "--queue-limit", "4096",
                      "--kv-tokens", "20000"]) as url:  # fmt: skip
        result = CliRunner().invoke(cli, ["replay", "--target", url, "--scrape",
                                          f"{url}/metrics@200ms", "--out", str(out),
                                          "--lag-limit", "100ms", str(archive)])  # fmt: skip
    assert result.exit_code == 0, result.output
    scraped = scrape_path(out)
    assert stat.S_IMODE(scraped.stat().st_mode) == 0o600
    header, *pages = msgpack.Unpacker(scraped.open("rb"), raw=False)
    assert header["format"] == "tailreplay-scrape" and header["failures"] == {}
    assert len(pages) >= 20  # 2 s and the drain, every 200 ms
    assert max(p["series"]["running"] for p in pages) == 4
    assert max(p["series"]["waiting"] for p in pages) > 50
    _agrees_with_the_requests_in_flight(pages, list(ArchiveReader([out])), 0.2)
    done = CliRunner().invoke(cli, ["report", str(out), "--replay-only", "--json", str(report)])
    assert done.exit_code == 0, done.output
    engine = json.loads(report.read_text())["engine"]
    rules = {f["rule"] for f in engine["findings"]}
    assert "admission" in rules and engine["thresholds"]["waiting"] == 50
    assert {"waiting", "running", "kv_cache_usage"} <= set(engine["series"])
    assert "target metrics" in done.output and "findings" in done.output


def _agrees_with_the_requests_in_flight(
    pages: list[dict], results: list[Record], interval_s: float
) -> None:
    """Each page's waiting + running is a count of requests in flight as the client saw
    them (sent, not yet answered) at some moment within one interval of the page's
    round trip."""
    sent = np.array([r.sent_ns for r in results], dtype=np.int64)
    done = sent + np.array([r.duration_ns for r in results], dtype=np.int64)
    step = int(interval_s * 1e9)
    for page in pages:
        t, held = page["t_ns"], page["series"]["waiting"] + page["series"]["running"]
        moments = np.linspace(t - step, t + page["took_ns"] + step, 41).astype(np.int64)
        in_flight = [int(((sent <= m) & (done > m)).sum()) for m in moments]
        assert min(in_flight) <= held <= max(in_flight), (held, min(in_flight), max(in_flight))


def test_a_light_run_has_no_findings(tmp_path: Path) -> None:
    archive = _steady(tmp_path / "light.msgpack", 5, 25, 200, 10)
    out, report = tmp_path / "r.msgpack", tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["replay", "--scrape", "target@200ms", "--out", str(out),
                                      "--lag-limit", "100ms", str(archive)])  # fmt: skip
    assert result.exit_code == 0, result.output
    done = CliRunner().invoke(cli, ["report", str(out), "--replay-only", "--json", str(report)])
    engine = json.loads(report.read_text())["engine"]
    assert engine["pages"] >= 20 and engine["findings"] == []
    assert "no engine limit hit" in done.output


def test_an_unreachable_metrics_page_is_one_warning_and_the_replay_goes_on(
    tmp_path: Path,
) -> None:
    archive = _busy_archive(tmp_path / "busy.msgpack")
    out = tmp_path / "r.msgpack"
    with sim_process(["--profile", "fast"]) as url:
        result = CliRunner().invoke(cli, ["replay", "--target", url, "--scrape",
                                          "http://127.0.0.1:9/metrics@200ms", "--limit", "50",
                                          "--out", str(out), str(archive)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.count("--scrape http://127.0.0.1:9/metrics") == 1
    header, *pages = msgpack.Unpacker(scrape_path(out).open("rb"), raw=False)
    assert pages == [] and header["failures"]["http://127.0.0.1:9/metrics"] >= 1


@pytest.mark.parametrize("text", ["ftp://x/metrics", "http://127.0.0.1:1/m@10ms", "target@x"])
def test_bad_scrape_options_are_usage_errors(text: str, tmp_path: Path) -> None:
    archive = _busy_archive(tmp_path / "busy.msgpack")
    result = CliRunner().invoke(cli, ["replay", "--dry-run", "--scrape", text, str(archive)])
    assert result.exit_code == 2 and "--scrape" in result.output


async def test_a_page_slower_than_its_interval_is_kept_and_its_missed_ticks_skipped(
    tmp_path: Path, unused_tcp_port: int
) -> None:
    from aiohttp import web

    async def slow_page(request: web.Request) -> web.Response:
        await asyncio.sleep(0.45)  # over two 200 ms ticks, under the 1 s a page is given
        return web.Response(text="vllm:num_requests_waiting 3\n")

    app = web.Application()
    app.router.add_get("/metrics", slow_page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    out = tmp_path / "r.scrape.msgpack"
    try:
        page = ScrapeTarget(f"http://127.0.0.1:{unused_tcp_port}/metrics", 0.2)
        async with scraping([page], out, lambda line: None):
            await asyncio.sleep(2.0)
    finally:
        await runner.cleanup()
    header, *pages = msgpack.Unpacker(out.open("rb"), raw=False)
    assert header["failures"] == {} and 3 <= len(pages) <= 5
    assert all(p["series"]["waiting"] == 3 and p["took_ns"] >= 0.45e9 for p in pages)
    gaps = np.diff([p["t_ns"] for p in pages])
    assert gaps.min() >= 0.55e9  # the next page waits for the next tick, not at once


async def _scrape_raw(
    tmp_path: Path, answer: Callable[[str], bytes], userinfo: str = "", seconds: float = 0.7
) -> tuple[ScrapeTarget, dict, list[dict], list[str]]:
    """Scrape (every 200 ms, for ``seconds``) a bare TCP server that answers each request
    head on a connection with ``answer(head)``; the page, the file's header and pages,
    and what was said."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Every request on the connection gets its answer; the client ends it.
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError,
                                 asyncio.CancelledError):  # fmt: skip
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                writer.write(answer(head))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    out, said = tmp_path / "r.scrape.msgpack", []
    async with server:
        page = ScrapeTarget(f"http://{userinfo}127.0.0.1:{port}/metrics", 0.2)
        async with scraping([page], out, said.append):
            await asyncio.sleep(seconds)
        server.close()
    assert b"s3cret" not in out.read_bytes()
    header, *pages = msgpack.Unpacker(out.open("rb"), raw=False)
    return page, header, pages, said


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "malformed response"),  # not HTTP at all
        (b"HTTP/1.1 200 OK\r\nContent-Length: 40000000\r\n\r\n" + b"x" * 2**20, "over"),
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "HTTP 404"),
    ],
)
async def test_a_page_that_is_not_metrics_is_one_warning_and_a_count(
    tmp_path: Path, answer: bytes, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tailreplay.replayer.scrape as scrape

    monkeypatch.setattr(scrape, "MAX_PAGE_BYTES", 2**19)  # the 40 MB page is cut at 512 KB
    page, header, pages, said = await _scrape_raw(tmp_path, lambda head: answer)
    assert pages == [] and header["failures"][page.url] >= 2
    warnings = [line for line in said if line.startswith("warning:")]
    assert len(warnings) == 1 and why in warnings[0], said


async def test_credentials_in_a_scrape_url_are_sent_as_basic_auth_and_never_stored(
    tmp_path: Path,
) -> None:
    def answer(head: str) -> bytes:
        auth = [v.strip() for k, _, v in (x.partition(":") for x in head.split("\r\n"))
                if k.lower() == "authorization"]  # fmt: skip
        ok = auth == ["Basic cHJvbTpzM2NyZXQgcHc="]  # base64 of "prom:s3cret pw"
        body = b"vllm:num_requests_waiting 2\n" if ok else b""
        status = b"200 OK" if ok else b"401 Unauthorized"
        return (b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode()
                + b"\r\n\r\n" + body)  # fmt: skip

    page, header, pages, said = await _scrape_raw(
        tmp_path, answer, userinfo="prom:s3cret%20pw@", seconds=0.5
    )
    port = page.url.rsplit(":", 1)[1].split("/")[0]
    assert header["failures"] == {} and pages and pages[0]["series"]["waiting"] == 2
    assert header["targets"][0]["url"] == f"http://***@127.0.0.1:{port}/metrics"
    assert not any("s3cret" in line for line in said)
