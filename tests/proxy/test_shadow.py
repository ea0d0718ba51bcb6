"""``proxy --shadow``: a share of production's generating requests copied to a second
deployment, off the request path, both sides recorded and compared.

Production is the built-in simulator, the shadow a slower one; the client is the
openai SDK. Shadows that are dead, hang or fail leave production's answers byte for
byte what its upstream sent, and its latency where it was without a shadow.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import free_port
from tests.proxy_helpers import exit_line_counts, serve_in_thread, start_proxy_process
from tests.shadow_helpers import fixed_upstream, shadow_app, stop_proxy

QUICK = ["--decode-base-ms", "2", "--prefill-base-ms", "1", "--prefill-per-token-ms", "0"]
# The shadow is far slower than production (first token 30 ms against 1 ms): its
# figures stand apart from production's on a machine busy with other work.
SLOWER = ["--decode-base-ms", "15", "--prefill-base-ms", "30", "--prefill-per-token-ms", "0"]


def _traceparent(rng: random.Random) -> str:
    return f"00-{rng.randbytes(16).hex()}-{rng.randbytes(8).hex()}-01"


def _chat(base: str, n: int, seed: int) -> None:
    """``n`` requests through the openai SDK, streamed and not, each in a trace of its
    own (seeded ids: the share copied is the same every run), 8 at a time."""
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-client-credential-0123456789")
    rng = random.Random(seed)
    parents = [_traceparent(rng) for _ in range(n)]

    def one(i: int) -> None:
        headers = {"traceparent": parents[i]}
        messages = [{"role": "user", "content": f"question {i}: " + "word " * (i % 40)}]
        if i % 2:
            client.chat.completions.create(
                model="m", messages=messages, max_tokens=4, extra_headers=headers
            )
        else:
            stream = client.chat.completions.create(
                model="m", messages=messages, max_tokens=4, stream=True, extra_headers=headers
            )
            for _ in stream:
                pass

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


def test_a_shadowed_capture_holds_both_sides_of_the_sampled_share(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    with sim_process(QUICK) as production, sim_process(SLOWER) as staging:
        key = tmp_path / "sampling.key"
        key.write_text("tests/test_shadow.py fixed sampling secret")
        # Seeded trace ids and a fixed key: the share copied is the same every run.
        proc, url, _ = start_proxy_process(
            production,
            out,
            "--shadow",
            staging,
            "--shadow-share",
            "10%",
            "--sampling-key-file",
            str(key),
        )
        try:
            _chat(url, 600, seed=11)
        finally:
            served, written, dropped = exit_line_counts(stop_proxy(proc))
    originals = {r.span_id: r for r in ArchiveReader(sorted(out.iterdir()))}
    copies = list(ArchiveReader(sorted(out.iterdir()), shadows="only"))
    assert len(originals) == 600 and served == written == 600 + len(copies) and dropped == 0
    assert abs(len(copies) / 600 - 0.10) <= 0.03, len(copies)
    streamed = 0
    for copy in copies:
        original = originals[copy.shadow_of]  # type: ignore[index]
        assert copy.trace_id == original.trace_id and copy.parent_span_id == original.span_id
        assert copy.status == 200 and copy.error is None and copy.output_tokens
        streamed += bool(copy.stream)
    assert 0 < streamed < len(copies)  # both kinds were copied
    report = tmp_path / "r.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tailreplay",
            "report",
            str(out),
            "--shadow",
            "--slo",
            "ttft:p99<=1.2x",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # the shadow is slower: the SLO is missed
    doc = json.loads(report.read_text())
    assert doc["overall"]["recorded"]["requests"] == doc["overall"]["replayed"]["requests"]
    assert doc["deltas"]["latency_ratio"]["p50"] > 1.2
    ttft = [doc["overall"][s]["metrics"]["ttft"]["p50"]["value"] for s in ("recorded", "replayed")]
    assert ttft[1] > ttft[0]
    assert doc["slo"]["rows"] and not doc["slo"]["passed"]
    assert done.stdout.startswith(f"shadow at {staging}: {len(copies)} copied requests (10% of")


def test_a_copy_carries_the_shadows_credentials_and_model_not_the_clients(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    with (
        serve_in_thread(fixed_upstream()) as production,
        serve_in_thread(shadow_app("500", seen)) as shadow,
    ):
        proc, url, _ = start_proxy_process(
            production,
            tmp_path / "c",
            "--shadow",
            shadow,
            "--shadow-share",
            "100%",
            "--shadow-header",
            "Authorization: Bearer sk-staging-0123456789abcdef",
            "--shadow-model-map",
            "m=m-staging",
        )
        try:
            client = openai.OpenAI(
                base_url=f"{url}/v1",
                api_key="sk-client-credential-0123456789",
                organization="org-client",
                default_headers={"X-Goog-Api-Key": "goog-client-secret", "X-Trace-Me": "yes"},
                default_query={"api-key": "query-client-secret", "api-version": "2024-06-01"},
            )
            for _ in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            ):
                pass
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop_proxy(proc)
    (copy,) = seen
    assert copy["headers"]["Authorization"] == "Bearer sk-staging-0123456789abcdef"
    # Every name the recorder's rule calls a credential stays behind, and the account.
    shown = json.dumps(copy)
    assert "sk-client" not in shown and "client-secret" not in shown and "org-client" not in shown
    assert {k.lower(): v for k, v in copy["headers"].items()}.get("x-trace-me") == "yes", copy
    assert copy["path"] == "/v1/chat/completions?api-version=2024-06-01"
    assert copy["body"]["model"] == "m-staging"
    # The copy's record holds what the shadow was sent (its headers redacted by rule).
    (record,) = ArchiveReader(sorted((tmp_path / "c").iterdir()), shadows="only")
    assert record.path == "/v1/chat/completions?api-version=2024-06-01"
    names = {name.lower() for name, _ in record.req_headers or []}
    assert "authorization" in names and not names & {"x-goog-api-key", "openai-organization"}
    assert copy["body"]["stream_options"] == {"include_usage": True}  # tokens are counted


def _refused(tmp_path: Path, *args: str) -> str:
    """``tailreplay proxy`` with ``args`` (admin port off, captures in tmp_path): exits
    2 before it listens; its one line of error."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tailreplay",
            "proxy",
            "--admin-listen",
            "off",
            "--out",
            str(tmp_path / "c"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / "c").exists()
    return done.stderr


@pytest.mark.parametrize("where", ["upstream", "listener"])
def test_a_shadow_that_is_production_is_refused(tmp_path: Path, where: str) -> None:
    port = free_port()
    upstream = f"http://127.0.0.1:{free_port()}"
    shadow = (
        upstream.replace("127.0.0.1", "localhost")
        if where == "upstream"
        else (f"http://127.0.0.1:{port}")
    )
    error = _refused(
        tmp_path, "--upstream", upstream, "--listen", f"127.0.0.1:{port}", "--shadow", shadow
    )
    assert "which is production (an upstream or this proxy)" in error


@pytest.mark.parametrize("flag", ["--upstream", "--shadow"])
def test_a_base_url_with_a_query_is_refused(tmp_path: Path, flag: str) -> None:
    # The request's path would follow the query: "/?key=…/v1/chat/completions".
    urls = {"--upstream": "http://127.0.0.1:9", "--shadow": "http://127.0.0.1:10"}
    urls[flag] += "/?api_key=secret-in-url"
    error = _refused(tmp_path, "--upstream", urls["--upstream"], "--shadow", urls["--shadow"])
    assert "a base URL takes no query or fragment" in error and "secret-in-url" not in error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shadow", "http://127.0.0.1:10", "--shadow-share", "1"], "give the share in percent"),
        (["--shadow", "http://127.0.0.1:10", "--shadow-share", "150%"], "at most 100%"),
        (["--shadow", "http://127.0.0.1:10", "--shadow-share", "1e-30%"], "too small a share"),
        (["--shadow-share", "50%"], "--shadow-share shapes the copies sent to --shadow"),
        (["--shadow-share", "10%"], "which is not given: give --shadow URL"),  # the default
        (["--shadow-max-inflight", "64"], "--shadow-max-inflight shapes the copies"),
        (["--shadow-max-time", "60s"], "--shadow-max-time shapes the copies"),
        (["--shadow-header", "Authorization: Bearer k"], "give --shadow URL"),
    ],
)
def test_shadow_options_that_would_mislead_are_refused(
    tmp_path: Path, args: list[str], message: str
) -> None:
    # A bare 1 meant as 1% would copy all of production to staging.
    assert message in _refused(tmp_path, "--upstream", "http://127.0.0.1:9", *args)
