"""A real Prometheus scrapes the proxy's admin port; its counts equal what was sent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import openai
import pytest

from tailreplay.sim.launcher import sim_process
from tests.helpers import free_port
from tests.telemetry.conftest import PROMETHEUS, wait_http

pytestmark = pytest.mark.skipif(
    not PROMETHEUS, reason="prometheus not installed: run `make test-telemetry`"
)


def _query(base: str, expr: str) -> float | None:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        result = json.load(r)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _start_proxy(upstream: str, out: Path) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "tailreplay", "proxy", "--upstream", upstream,
            "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--out", str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    urls = []
    for line in proc.stdout:
        urls += [w for w in line.split() if w.startswith("http://127.0.0.1")]
        if line.startswith("recording into"):
            break
    return proc, urls[0], urls[2]  # listen -> upstream, admin


def test_prometheus_counts_what_went_through_the_proxy(tmp_path: Path) -> None:
    with sim_process(["--profile", "fast"]) as sim:
        proxy, url, admin = _start_proxy(sim, tmp_path / "captures")
        prom_port = free_port()
        config = tmp_path / "prometheus.yml"
        target = admin.removeprefix("http://")
        config.write_text(
            "global: {scrape_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: tailreplay\n    static_configs: [{{targets: ['{target}']}}]\n"
        )
        log = tmp_path / "prometheus.log"
        with open(log, "wb") as out:
            prom = subprocess.Popen(
                [
                    str(PROMETHEUS), f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                stdout=out,
                stderr=out,
            )  # fmt: skip
        base = f"http://127.0.0.1:{prom_port}"
        try:
            wait_http(f"{base}/-/ready", prom, 60, log)
            client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
            sent, prompt, completion = 0, 0, 0
            for i in range(60):
                messages = [{"role": "user", "content": f"question {i} " * (i % 7 + 1)}]
                if i % 2:
                    r = client.chat.completions.create(
                        model="m", messages=messages, max_tokens=i % 9 + 1
                    )
                    usage = r.usage
                else:
                    stream = client.chat.completions.create(
                        model="m",
                        messages=messages,
                        max_tokens=i % 9 + 1,
                        stream=True,
                        stream_options={"include_usage": True},
                    )
                    usage = [c for c in stream][-1].usage
                assert usage is not None
                sent += 1
                prompt += usage.prompt_tokens
                completion += usage.completion_tokens
            expected = {
                "sum(tailreplay_proxy_requests_total)": sent,
                'sum(tailreplay_proxy_requests_total{status="2xx"})': sent,
                'sum(tailreplay_proxy_tokens_total{kind="input"})': prompt,
                'sum(tailreplay_proxy_tokens_total{kind="output"})': completion,
                "sum(tailreplay_proxy_ttft_seconds_count)": sent // 2,  # the streamed half
            }
            deadline = time.monotonic() + 30
            while True:
                got = {expr: _query(base, expr) for expr in expected}
                if got == expected or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert got == expected
        finally:
            prom.terminate()
            proxy.terminate()
            prom.wait(timeout=20)
            proxy.wait(timeout=30)
