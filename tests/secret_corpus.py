"""A corpus of credentials and of benign values, for redaction tests and benchmarks.

Credentials are made from the formats their issuers document (prefixes, lengths,
alphabets), each kind ten times or more from a seeded generator: the same corpus
on every run. ``SHAPED`` kinds are recognisable whatever name they are given;
the others are credentials only by the name they are sent under.
"""

from __future__ import annotations

import base64
import json
import random
import string
import uuid
from collections.abc import Callable

ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"


def _s(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(rng: random.Random) -> str:
    head = _b64url(b'{"alg":"HS256","typ":"JWT"}')
    body = _b64url(json.dumps({"sub": _s(rng, 8), "iat": rng.randrange(10**9, 2 * 10**9)}).encode())
    return f"{head}.{body}.{_s(rng, 43, URLSAFE)}"


def _pem(rng: random.Random) -> str:
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
    lines = "\n".join(_s(rng, 64, B64) for _ in range(rng.randrange(3, 8)))
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{lines}\n-----END {kind}PRIVATE KEY-----"


Maker = Callable[[random.Random], str]

SHAPED: dict[str, Maker] = {
    "openai_legacy": lambda r: f"sk-{_s(r, 20)}T3BlbkFJ{_s(r, 20)}",
    "openai_project": lambda r: f"sk-proj-{_s(r, r.randrange(40, 90), URLSAFE)}",
    "anthropic": lambda r: f"sk-ant-api03-{_s(r, 93, URLSAFE)}AA",
    "stripe_secret": lambda r: f"sk_live_{_s(r, 24)}",
    "stripe_restricted": lambda r: f"rk_live_{_s(r, 24)}",
    "aws_access_key_id": lambda r: "AKIA" + _s(r, 16, string.ascii_uppercase + string.digits),
    "github_classic": lambda r: f"ghp_{_s(r, 36)}",
    "github_oauth": lambda r: f"gho_{_s(r, 36)}",
    "github_fine_grained": lambda r: f"github_pat_{_s(r, 22)}_{_s(r, 59)}",
    "gitlab": lambda r: f"glpat-{_s(r, 20, URLSAFE)}",
    "slack_bot": lambda r: (
        f"xoxb-{_s(r, 11, string.digits)}-{_s(r, 13, string.digits)}-{_s(r, 24)}"
    ),
    "slack_user": lambda r: (
        f"xoxp-{_s(r, 11, string.digits)}-{_s(r, 12, string.digits)}-{_s(r, 32, HEX)}"
    ),
    "huggingface": lambda r: f"hf_{_s(r, 34)}",
    "google_api": lambda r: f"AIza{_s(r, 35, URLSAFE)}",
    "jwt": _jwt,
    "npm": lambda r: f"npm_{_s(r, 36)}",
    "pypi": lambda r: f"pypi-AgEIcHlwaS5vcmc{_s(r, r.randrange(70, 160), URLSAFE)}",
    "sendgrid": lambda r: f"SG.{_s(r, 22, URLSAFE)}.{_s(r, 43, URLSAFE)}",
    "twilio": lambda r: f"SK{_s(r, 32, HEX)}",
    "mailchimp": lambda r: f"{_s(r, 32, HEX)}-us{r.randrange(1, 21)}",
    "telegram_bot": lambda r: f"{r.randrange(10**8, 10**10)}:AA{_s(r, 33, URLSAFE)}",
    "square": lambda r: f"sq0atp-{_s(r, 22, URLSAFE)}",
    "pem_private_key": _pem,
}
UNSHAPED: dict[str, Maker] = {
    "password": lambda r: _s(r, r.randrange(10, 20), ALNUM + "!#$%*"),
    "hex_token": lambda r: _s(r, 32, HEX),
    "aws_secret_access_key": lambda r: _s(r, 40, B64),
    "opaque_token": lambda r: _s(r, r.randrange(20, 48), URLSAFE),
}
PER_KIND = 12


def credentials(seed: int = 20261204) -> list[tuple[str, str, bool]]:
    """(kind, credential, shaped) for every kind, ``PER_KIND`` of each."""
    rng = random.Random(seed)
    out = []
    for table, shaped in ((SHAPED, True), (UNSHAPED, False)):
        for kind, make in table.items():
            out += [(kind, make(rng), shaped) for _ in range(PER_KIND)]
    return out


def benign(seed: int = 7) -> dict[str, list[str]]:
    """Values that hold no credential, by class, as prompts and tools send them."""
    rng = random.Random(seed)
    words = "the a model token tokens key keys password session secret API answer write code"
    words += " summarise explain function returns value list of items in Python and SQL query"
    vocabulary = words.split(" ")
    prose = [
        " ".join(rng.choice(vocabulary) for _ in range(rng.randrange(8, 40))) + "."
        for _ in range(60)
    ]
    code = [
        "def add(a, b):\n    return a + b",
        "for (let i = 0; i < n; i++) { total += xs[i]; }",
        "SELECT id, name FROM users WHERE created_at > '2024-01-01' LIMIT 10;",
        "const config = { retries: 3, timeoutMs: 5000, model: 'gpt-4o' };",
        "git commit -m 'fix: handle empty input' && git push origin main",
        "docker run -p 8080:80 -e LOG_LEVEL=debug nginx:1.27",
        "kubectl get pods -n inference --selector app=vllm",
        "pip install --upgrade numpy==1.26.4 scipy>=1.11",
        "max_tokens = 512  # the completion budget",
        "keyboard shortcuts: Ctrl+K opens the command palette",
    ] * 6
    ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(60)]
    hashes = [_s(rng, 40, HEX) for _ in range(30)] + [_s(rng, 64, HEX) for _ in range(30)]
    images = [
        "data:image/png;base64," + base64.b64encode(rng.randbytes(300)).decode() for _ in range(30)
    ]
    numbers = [str(rng.randrange(10**5, 10**15)) for _ in range(30)] + [
        f"{rng.random() * 1000:.6f}" for _ in range(30)
    ]
    urls = [f"https://docs.example.com/v{rng.randrange(1, 9)}/guide?page={i}" for i in range(60)]
    return {
        "prose": prose,
        "code": code,
        "uuid": ids,
        "hash": hashes,
        "base64_image": images,
        "number": numbers,
        "url": urls,
    }
