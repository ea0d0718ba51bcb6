"""Redaction on text nobody here wrote: the Python standard library's sources and the
machine's licence texts, sent as prompts. Code stays code (every changed module
still parses), and few are changed at all; the credentials code and prose hold are
still masked."""

from __future__ import annotations

import ast
import glob
import re
import sysconfig
from pathlib import Path

import pytest

from tailreplay.traces.text.redact import redact_text

KEY = b"k" * 32
CREDENTIAL_MASK = re.compile(r"\[(?:SECRET|KEY):fp:")


@pytest.mark.parametrize(
    "code",
    [
        "password = input('Password: ')",
        "token = session.get('token')",
        "const apiKey = process.env.OPENAI_API_KEY;",
        "items.sort(key=len, reverse=True)",
        "key = next(iter(self))",
        "self.key = '_local.' + str(id(self))",
        "return sorted(iterable, key=key)[:n]",
        "key, value = (fam, pro)",
        "self.password = config['password']",
        "export TOKEN=$GITHUB_TOKEN",
        "Explain the key: value pairs in a dict",
        "print(f'{name}(key={self._key!r})')",
        "ISBN 978-0-306-40615-7, ISBN-13: 9780306406157",
        "key = 'PYTHONCASEOK'",
        "key0 = 305419896",
        'AuthenticationInstant="2002-04-18T16:56:53Z"',
        "auth_header = 'Authorization'",
        'print("shlex: token=EOF")',
        "'Set-Cookie: fig=newton\\r\\nSet-Cookie: sugar=wafer'",
        'apt::key::gpgcommand "<STRING>";',
        "git-credential-osxkeychain.o: git-credential-osxkeychain.c",
        "'sid_et': 'sid_ET.UTF-8',",
        "key = key in cache ? cache[key] : null",
        "Files: contrib/command-not-found/pk-command-not-found.c",
        "const password = 'Password used to generate key';",
        "- password:     The password for the authentication.",
        "const session = new inspector.Session();",
        "const myURL = new URL('https://abc:xyz@example.com');",
        "cvs://:pserver:anoncvs@sources.redhat.com:/cvs/src",
        "echo machine git login username password password",
        "mngr->getKey = xmlSecKeysMngrGetKey;",
        '"PWD": "/home/bob/src",',
        "self.hide_cookie2 = hide_cookie2",
        "RegEnumKey = win32api.RegEnumKey",
        "                Public-Key: (2048 bit)",
        "tool --smtp-auth=none --verbose",
        "private_key: CertificateIssuerPrivateKeyTypes,",
        "beta_key = key if isinstance(key, (bytes,)) else key.encode()",
        'in a "Set-Cookie:" line. The data should be',
        "'authorization: basic ...' header",
        "credential: disallow Carriage Returns",
        "postgresql://user:password@localhost:5432/mydb",
        "-K PASS_MAX_DAYS =-1",
        "os.getenv('PASSWORD_MIN_LENGTH', '12')",
        "apiKey: string;",
        "OPENAI_API_KEY=your-api-key-here",
        "X-Session-Token-Ttl: 3600",
        "GET /v1/items?password_reset=1&next_page_token=CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA3",
        "X-Note: sdk-api-key:17",
        "username, have_password, password = userinfo.partition(b':')",
        "        passwd = unquote(passwd or '')",
    ],
)
def test_code_and_prose_that_name_a_credential_stay_as_they_are(code: str) -> None:
    assert redact_text(code, KEY) == code


@pytest.mark.parametrize(
    "text",
    [
        "password=hunter2",
        "api_key = 'Zx81kq0LmnB3'",
        "password: dragon",
        'client = OpenAI(api_key="sk-proj-abcdefghijklmnopqrstuvwx")',
        "OPENAI_API_KEY=abcdefgh12345678",
        "token = GQHiUkjkad2y4oGnScGPtHs",
        "X-Custom-Auth: rczsEIHVtxH",
        "session_token: rrkzaV$Kn!yCe6V$o",
        "key = 8f14e45fceea167a5a36dedd4bea2543",
        "Cookie: session=abc123; theme=dark",
        "auth = Bearer abc",
        "git clone https://bob:S3cr3tPassw0rd@git.internal/repo",
        "export OPENAI_API_KEY=l7y1e8.z4nouiysoi853jcq",
        "tool --password 'hunter2' --verbose",
        "$db = ['password' => 'hunter2'];",
        "请使用是sk_live_51HxQ2eLkdIs8aW3bC9dE0fG1hJ2kL3mN4请保密",
        "**hvs.CAESIJaB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3aB3**",
        "AZURE_DEVOPS_PAT=a8k2m4n5p7q9r1s3t5u7v9w1x3y5z7b2c4d6e8f0g2h4i6j8",
        "postgresql://user:S3cretPw0rd@localhost:5432/mydb",
        "export DB_PASSWORD=ec(esMqzS",
    ],
)
def test_credentials_code_and_configuration_hold_are_still_masked(text: str) -> None:
    assert CREDENTIAL_MASK.search(redact_text(text, KEY)), text


def _texts(paths: list[str]) -> dict[str, str]:
    out = {}
    for path in paths:
        try:
            out[path] = Path(path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
    return out


def test_the_standard_library_keeps_its_code() -> None:
    """Every fourth module: at most 1% changed by a credential's mask (the full set,
    in bench/redaction.py: 2 of 799, example passwords in docstrings), and every
    module changed at all (emails of authors are masked: personal data) still
    parses."""
    stdlib = sysconfig.get_paths()["stdlib"]
    paths = sorted(glob.glob(f"{stdlib}/**/*.py", recursive=True))
    paths = [p for p in paths if "site-packages" not in p and "/test" not in p][::4]
    texts = _texts(paths)
    assert len(texts) > 150
    masked, broken = [], []
    for path, text in texts.items():
        out = redact_text(text, KEY)
        if out == text:
            continue
        if CREDENTIAL_MASK.search(out):
            masked.append(path)
        try:
            ast.parse(out)
        except SyntaxError:
            broken.append(path)
    assert len(masked) <= len(texts) * 0.01, masked
    assert broken == [], broken


def test_the_machines_documentation_is_left_alone() -> None:
    """Every third readable file under /usr/share/doc (changelogs, READMEs, HTML and
    Markdown with code, Makefiles, examples): at most 1% changed by a credential's
    mask (the full set, in bench/redaction.py: 13 of 2,844, example passwords and
    keys written as such)."""
    paths = [
        p
        for p in sorted(glob.glob("/usr/share/doc/**/*", recursive=True))
        if Path(p).is_file() and not p.endswith((".gz", ".png", ".jpg", ".svg", ".gif"))
    ]
    texts = _texts(paths[::3])
    if len(texts) < 100:
        pytest.skip(f"only {len(texts)} readable documents under /usr/share/doc here")
    masked = [p for p, t in texts.items() if CREDENTIAL_MASK.search(redact_text(t, KEY))]
    assert len(masked) <= len(texts) * 0.01, masked


def test_licence_texts_are_left_alone() -> None:
    texts = _texts(sorted(glob.glob("/usr/share/common-licenses/*")))
    assert len(texts) >= 5
    changed = [p for p, t in texts.items() if CREDENTIAL_MASK.search(redact_text(t, KEY))]
    assert changed == []
