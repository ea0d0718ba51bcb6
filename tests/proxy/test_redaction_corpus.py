"""No secret leaves the proxy: a corpus of credentials through the real proxy process.

Each body mode runs ``tailreplay proxy`` as a process (upstream URL with a password,
``--otlp-capture-content`` to an in-process OTLP receiver) in front of an upstream
that echoes prompts back as completions. Every byte the proxy produced — archive
files, stdout, stderr, ``/metrics``, the OTLP export requests — is searched for each
secret, raw, base64, JSON-escaped and percent-encoded. In ``full`` mode the archive
keeps request bodies as sent (the user's choice), so only secrets sent in bodies may
be in its files; headers, paths and everything else are redacted in every mode.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import signal
import string
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from tests.helpers import free_port
from tests.otlp_receiver import Receiver, receiver
from tests.proxy_helpers import records, serve_app

START_S = 60.0  # bound on the proxy's start-up (spawn, tokenizer) on a busy machine
STOP_S = 30.0
DRAIN_S = 600.0
"""The longest the recorder may take to catch up before the stop: redacting hundreds of
bodies is seconds of CPU, which a busy machine stretches many times over."""


def _alnum(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _jwt() -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    return f"{head}.{_alnum(24)}.{_alnum(32)}"


def corpus() -> dict[str, str]:
    """Fresh credentials per run; the name's prefix says where each is sent:
    h_ header, q_ query, p_ path, b_ body, u_ the upstream URL."""
    return {
        "h_bearer": "sk-proj-" + _alnum(40),
        "h_proxy_basic": f"svc:{_alnum(16)}",
        "h_x_auth_token": _alnum(32),
        "h_apim": secrets.token_hex(16),
        "h_goog": "AIza" + _alnum(35),
        "h_x_api_key": "sk-ant-api03-" + _alnum(40),
        "h_api_key": secrets.token_hex(16),
        "h_cookie": _alnum(24),
        "h_amz_token": _alnum(40),
        "h_custom": _alnum(20),
        "h_private_token": "glpat-" + _alnum(20),
        "h_session": _alnum(20),
        "h_shape": "ghp_" + _alnum(36),
        "q_api_key": _alnum(24),
        "q_semicolon_key": _alnum(24),
        "q_sig": _alnum(43),
        "q_amz_signature": secrets.token_hex(32),
        "q_access_token": _alnum(30),
        "q_shape": "sk-" + _alnum(40),
        "p_key_segment": "sk-" + _alnum(40),
        "p_assign": _alnum(24),
        "p_matrix": _alnum(24),
        "p_github": "ghp_" + _alnum(36),
        "p_jwt": _jwt(),
        "b_api_key": _alnum(24),
        "b_password": _alnum(16),
        "b_secret": _alnum(16),
        "b_token": _alnum(16),
        "b_user": "alice-" + _alnum(12),
        "b_openai": "sk-" + _alnum(48),
        "b_escaped": "sk-" + _alnum(40),
        "b_aws": "AKIA" + _alnum(16, string.ascii_uppercase + string.digits),
        "b_github": "ghp_" + _alnum(36),
        "b_jwt": _jwt(),
        "b_email": _alnum(10, string.ascii_lowercase) + "@example.com",
        "b_bearer": _alnum(32),
        "b_basic": f"admin:{_alnum(12)}",
        "b_tool_password": _alnum(16),
        "b_prompt_key": "sk-" + _alnum(40),
        "u_password": _alnum(20),
    }


def forms(secret: str) -> set[bytes]:
    """The ways a secret could be written: raw, base64, JSON-escaped, percent-encoded."""
    out = {
        secret,
        _b64(secret),
        base64.urlsafe_b64encode(secret.encode()).decode(),
        json.dumps(secret)[1:-1],
        secret.replace("-", "\\u002d"),
        quote(secret, safe=""),
    }
    return {f.encode() for f in out}


def _headers(c: dict[str, str]) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {c['h_bearer']}",
        "Proxy-Authorization": "Basic " + _b64(c["h_proxy_basic"]),
        "X-Auth-Token": c["h_x_auth_token"],
        "Ocp-Apim-Subscription-Key": c["h_apim"],
        "X-Goog-Api-Key": c["h_goog"],
        "X-Api-Key": c["h_x_api_key"],
        "Api-Key": c["h_api_key"],
        "Cookie": f"session={c['h_cookie']}; theme=dark",
        "X-Amz-Security-Token": c["h_amz_token"],
        "X-Custom-Cred": c["h_custom"],  # named by --redact-header
        "Private-Token": c["h_private_token"],
        "X-Session-Token": c["h_session"],
        "X-Debug-Note": f"tried {c['h_shape']}",  # a harmless name, a key's shape
        **READABLE,
    }


READABLE = {
    "User-Agent": "tailreplay-test/1.0",
    "X-Request-Id": "req-42",
    "OpenAI-Organization": "org-test",
    "Idempotency-Key": "idem-7",
}


def _paths(c: dict[str, str]) -> list[str]:
    return [
        f"/v1/keys/{c['p_key_segment']}/x",
        f"/v1/files/key={c['p_assign']}/content",
        f"/v1/models;api_key={c['p_matrix']}",
        f"/v1/files/{c['p_github']}",
        f"/v1/sessions/{c['p_jwt']}/events",
        f"/v1/models?api_key={c['q_api_key']}&limit=2",
        f"/v1/models?a=1;key={c['q_semicolon_key']}",
        f"/v1/models?sv=2024-11-04&sig={c['q_sig']}&se=x",
        f"/v1/models?X-Amz-Signature={c['q_amz_signature']}&X-Amz-Date=20240101T000000Z",
        f"/v1/models?x=1;access_token={c['q_access_token']}",
        f"/v1/models?q={c['q_shape']}",
    ]


def _chat_body(c: dict[str, str]) -> bytes:
    arguments = json.dumps({"password": c["b_tool_password"]})
    body = {
        "model": "m",
        "max_tokens": 8,
        "user": c["b_user"],
        "api_key": c["b_api_key"],
        "password": c["b_password"],
        "secret": c["b_secret"],
        "token": c["b_token"],
        "messages": [
            {"role": "system", "content": f"Keys {c['b_openai']} {c['b_aws']} {c['b_github']}."},
            {
                "role": "user",
                "content": f"My token is {c['b_jwt']}, mail {c['b_email']}. "
                f"Authorization: Bearer {c['b_bearer']} or Basic {_b64(c['b_basic'])}. ESCAPED",
            },
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "login", "arguments": arguments}},
                ],
            },
        ],
    }  # fmt: skip
    # A JSON-escaped key: the same string, written with \u002d for each '-'.
    escaped = "key " + c["b_escaped"].replace("-", "\\u002d")
    return json.dumps(body).replace("ESCAPED", escaped).encode()


async def _echo(request: web.Request) -> web.Response:
    """An upstream that answers a prompt with the prompt itself (so completions carry
    the secrets too), and anything else with an empty JSON object."""
    if request.method != "POST":
        return web.json_response({})
    body = await request.json()
    if "messages" in body:
        text = " ".join(m["content"] for m in body["messages"] if m.get("content"))
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
    else:
        choice = {"index": 0, "text": body["prompt"]}
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    return web.json_response({"choices": [{**choice, "finish_reason": "stop"}], "usage": usage})


@asynccontextmanager
async def _proxy(upstream: str, out: Path, args: list[str]) -> AsyncIterator[tuple[str, str]]:
    """``tailreplay proxy`` as a process; yields (url, admin url), stops it with SIGTERM.

    Never shedding (``--shed-after off``): what is checked is each record's redacted
    body and prompt, which a recorder short of CPU (a busy machine) would leave out."""
    port, admin = free_port(), free_port()
    log_out, log_err = out.parent / "stdout.txt", out.parent / "stderr.txt"
    with open(log_out, "wb") as so, open(log_err, "wb") as se:
        proc = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "tailreplay", "proxy", "--upstream", upstream],
            *["--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}"],
            *["--out", str(out), "--shed-after", "off", *args],
            stdout=so,
            stderr=se,
        )
    try:
        deadline = time.monotonic() + START_S
        while b"listening on" not in log_out.read_bytes():
            assert proc.returncode is None, log_err.read_text()
            assert time.monotonic() < deadline, "the proxy did not start"
            await asyncio.sleep(0.1)
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"
        # The stop is timed, not the recording: let the recorder catch up first (on a
        # busy machine its backlog took more than STOP_S to drain at SIGTERM).
        await _caught_up(f"http://127.0.0.1:{admin}", proc)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), STOP_S) == 0, log_err.read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _caught_up(admin: str, proc: asyncio.subprocess.Process) -> None:
    """Until the proxy's record backlog is empty (its ``/metrics``), or DRAIN_S."""
    deadline = time.monotonic() + DRAIN_S
    async with aiohttp.ClientSession() as s:
        while proc.returncode is None and time.monotonic() < deadline:
            async with s.get(admin + "/metrics") as r:
                text = await r.text()
            backlog = [
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith("tailreplay_proxy_record_backlog")
            ]
            if backlog == [0.0]:
                return
            await asyncio.sleep(0.2)


async def _send(url: str, c: dict[str, str]) -> None:
    """Every request of the corpus through the proxy, each answered 200."""
    headers = _headers(c)
    async with aiohttp.ClientSession() as s:
        for path in _paths(c):
            async with s.get(URL(url + path, encoded=True), headers=headers) as r:
                assert r.status == 200, path
        json_headers = {**headers, "Content-Type": "application/json"}
        prompt = json.dumps({"model": "m", "prompt": f"key {c['b_prompt_key']}", "max_tokens": 4})
        for path, body in (("/v1/chat/completions", _chat_body(c)), ("/v1/completions", prompt)):
            async with s.post(url + path, data=body, headers=json_headers) as r:
                assert r.status == 200, await r.text()


@pytest.mark.parametrize("bodies", ["none", "redacted", "full"])
async def test_no_secret_reaches_disk_logs_metrics_or_spans(tmp_path: Path, bodies: str) -> None:
    c = corpus()
    assert len(c) >= 30
    out = tmp_path / "out"
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _echo)
    async with serve_app(app) as upstream, receiver() as otlp:
        url_with_password = upstream.replace("http://", f"http://svc:{c['u_password']}@")
        args = ["--bodies", bodies, "--redact-header", "X-Custom-Cred"]
        args += ["--otlp-endpoint", otlp.url, "--otlp-capture-content"]
        async with _proxy(url_with_password, out, args) as (url, admin):
            await _send(url, c)
            async with aiohttp.ClientSession() as s, s.get(admin + "/metrics") as r:
                metrics = await r.read()
        await _wait_for_spans(otlp, 13)

    outputs = {
        "stdout": (tmp_path / "stdout.txt").read_bytes(),
        "stderr": (tmp_path / "stderr.txt").read_bytes(),
        "/metrics": metrics,
        "spans": b"".join(otlp.raw),
    }
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert files and all((p.stat().st_mode & 0o777) == 0o600 for p in files)
    archive = b"".join(p.read_bytes() for p in files)
    leaks = [
        f"{name} in {where}"
        for name, secret in c.items()
        for where, data in outputs.items()
        if any(f in data for f in forms(secret))
    ]
    kept_bodies = bodies == "full"  # bodies as sent, by the user's choice
    leaks += [
        f"{name} in the archive"
        for name, secret in c.items()
        if not (kept_bodies and name.startswith("b_")) and any(f in archive for f in forms(secret))
    ]
    assert not leaks, ", ".join(leaks)
    _check_what_is_kept(out, otlp, c, bodies, archive, outputs["stdout"], metrics)


async def _wait_for_spans(otlp: Receiver, n: int) -> None:
    deadline = time.monotonic() + 10  # exported before the proxy exits; a margin anyway
    while len(otlp.spans) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def _check_what_is_kept(
    out: Path,
    otlp: Receiver,
    c: dict[str, str],
    bodies: str,
    archive: bytes,
    stdout: bytes,
    metrics: bytes,
) -> None:
    """What a user relies on stays readable, so the test above could fail."""
    assert b"svc:***@" not in stdout and b"://***@127.0.0.1:" in stdout
    assert b"tailreplay_proxy_requests_total" in metrics
    recs = records(out)
    assert len(recs) == 13 and len(otlp.spans) == 13
    for rec in recs:
        recorded = dict(rec.req_headers or [])
        for name, value in READABLE.items():
            assert recorded[name.lower()] == value
        for name in ("authorization", "x-auth-token", "x-custom-cred", "x-debug-note", "cookie"):
            assert recorded[name].startswith("fp:"), name
    paths = {r.path for r in recs}
    assert "/v1/models?sv=2024-11-04&sig=" + _fp_of(paths, "sig=") + "&se=x" in paths
    assert any(p.endswith("&X-Amz-Date=20240101T000000Z") for p in paths)
    chat = next(r for r in recs if r.path == "/v1/chat/completions")
    assert chat.session is not None and chat.session.startswith("fp:")
    if bodies == "none":
        assert chat.req_body is None
    elif bodies == "redacted":
        assert chat.req_body is not None
        sent = json.loads(chat.req_body)
        assert sent["user"] == chat.session and sent["max_tokens"] == 8
        assert sent["password"].startswith("[SECRET:fp:")
        assert "[KEY:fp:" in sent["messages"][0]["content"]
    else:
        assert chat.req_body == _chat_body(c)
    content = [s.attributes for s in otlp.spans if "gen_ai.input.messages" in s.attributes]
    assert len(content) == 2  # the chat and the completion; GETs carry no prompt
    chat_span = next(a for a in content if "tool_calls" in a["gen_ai.input.messages"])
    assert "[KEY:fp:" in chat_span["gen_ai.input.messages"]
    assert "[EMAIL:fp:" in chat_span["gen_ai.output.messages"]
    assert b"fp:" in archive


def _fp_of(paths: set[str], marker: str) -> str:
    """The fingerprint that replaced the value after ``marker`` in one of ``paths``."""
    path = next(p for p in paths if marker in p)
    value = path.split(marker, 1)[1].split("&", 1)[0]
    assert value.startswith("fp:")
    return value
