"""The whole credential corpus (tests/secret_corpus.py) through the real proxy process,
in every body mode with ``--otlp-capture-content``: no credential in the archive (its
request bodies aside in ``full`` mode, which keeps them by the user's choice), the
proxy's output, ``/metrics`` or the spans.

Each credential goes in one chat request: in a header and a query parameter under
names the rule masks, assigned to a name in the prompt, as a tool call's argument,
as the value of an environment pair, and — a shaped one — bare in the prompt. The
upstream echoes the prompt, so completions carry it too.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from urllib.parse import quote

import aiohttp
import msgpack
import pytest
from aiohttp import web
from yarl import URL

from tests.otlp_receiver import receiver
from tests.proxy.test_redaction_corpus import _echo, _proxy, _wait_for_spans, forms
from tests.proxy_helpers import records, serve_app
from tests.secret_corpus import credentials

CORPUS = credentials()


def _request(secret: str, shaped: bool) -> tuple[str, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"}
    path = "/v1/chat/completions"
    if "\n" not in secret:  # a header or a URL cannot hold a PEM block's lines
        headers["X-Api-Key2"] = secret
        path += "?apikey2=" + quote(secret, safe="")
    prompt = f"export OPENAI_API_KEY={secret}\n" + (f"and bare: {secret} ok" if shaped else "")
    arguments = json.dumps({"password": secret})
    body = {
        "model": "m",
        "max_tokens": 4,
        "env": [{"name": "DB_PASSWORD", "value": secret}],
        "messages": [
            {"role": "user", "content": prompt},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": arguments},
                    }
                ],
            },
        ],
    }
    return path, headers, json.dumps(body).encode()


def _without_bodies(out: Path) -> bytes:
    """The archive's records with their request bodies left out, packed."""
    return b"".join(
        msgpack.packb(
            {k: v for k, v in dataclasses.asdict(r).items() if k != "req_body"}, default=str
        )
        for r in records(out)
    )


@pytest.mark.parametrize("bodies", ["none", "redacted", "full"])
async def test_no_credential_of_the_corpus_leaves_the_proxy(tmp_path: Path, bodies: str) -> None:
    out = tmp_path / "out"
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _echo)
    async with serve_app(app) as upstream, receiver() as otlp:
        args = ["--bodies", bodies, "--otlp-endpoint", otlp.url, "--otlp-capture-content"]
        async with _proxy(upstream, out, args) as (url, admin), aiohttp.ClientSession() as s:
            for _, secret, shaped in CORPUS:
                path, headers, body = _request(secret, shaped)
                async with s.post(URL(url + path, encoded=True), data=body, headers=headers) as r:
                    assert r.status == 200, await r.text()
            async with s.get(admin + "/metrics") as r:
                metrics = await r.read()
        await _wait_for_spans(otlp, len(CORPUS))

    files = sorted(p for p in out.rglob("*") if p.is_file())
    archive = b"".join(p.read_bytes() for p in files)
    outputs = {
        "archive": _without_bodies(out) if bodies == "full" else archive,
        "stdout": (tmp_path / "stdout.txt").read_bytes(),
        "stderr": (tmp_path / "stderr.txt").read_bytes(),
        "/metrics": metrics,
        "spans": b"".join(otlp.raw),
    }
    leaks = [
        f"{kind} in {where}"
        for kind, secret, _ in CORPUS
        for where, data in outputs.items()
        if any(f in data for line in secret.split("\n") if len(line) >= 12 for f in forms(line))
    ]
    assert not leaks, f"{len(leaks)} leaks: {', '.join(sorted(set(leaks))[:10])}"
    # The test could fail: every request is recorded and exported, content included.
    assert len(records(out)) == len(CORPUS) and len(otlp.spans) >= len(CORPUS)
    assert sum(b"[SECRET:fp:" in raw for raw in otlp.raw) > 0
