"""Redaction: recall on the credential corpus, false positives on the benign corpus and
on text nobody here wrote (the Python standard library's modules, the machine's
documentation), and throughput on 4 KB request bodies; beside detect-secrets'
plugins when installed.

The corpus is tests/secret_corpus.py (324 credentials of 27 kinds, 390 benign values
in 7 classes). Recall here is for a credential written in free text ("my key is X
ok"): the place where only its shape can find it. detect-secrets runs its format
plugins (not the keyword and entropy ones, which judge source-code lines) with
``analyze_string`` on each line. Throughput is ``redact_body`` on a chat request of
4 KB of prompt text, median of 5 runs: prose with the punctuation of prompts
(colons, equals signs, URLs, numbers), and 4 KB of the GPL's text where Debian
installs it (prose nobody wrote for this benchmark).

Run: ``.venv/bin/python bench/redaction.py`` (``pip install detect-secrets`` for its
column).
"""

from __future__ import annotations

import ast
import glob
import json
import random
import re
import statistics
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tailreplay.traces.text.redact import redact_text
from tailreplay.traces.text.redact_bodies import redact_body
from tests.secret_corpus import benign, credentials

KEY = b"k" * 32
PROMPT = (
    "the model should answer: note that a value=3 is fine, see https://example.com/docs?page=2 "
    "and the key points; Q: what is 2+2? A: four. Write a function that returns the sum (x + y)"
)


def detect_secrets_finder() -> Callable[[str], set[str]] | None:
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    except ImportError:
        return None
    judged_lines = {"KeywordDetector", "IPPublicDetector"}
    entropy = {"Base64HighEntropyString", "HexHighEntropyString"}
    plugins = [
        cls()
        for cls in get_mapping_from_secret_type_to_class().values()
        if cls.__name__ not in judged_lines | entropy
    ]

    def found(text: str) -> set[str]:
        out: set[str] = set()
        for line in text.split("\n"):
            for plugin in plugins:
                out |= set(plugin.analyze_string(line))
        return out

    return found


def missed(secret: str, text: str, found: set[str], redacted: str | None) -> bool:
    if redacted is not None:
        return any(line in redacted for line in secret.split("\n") if len(line) >= 12)
    return not any(f and (f in secret or secret in f) for f in found)


def recall(ds: Callable[[str], set[str]] | None) -> None:
    total: Counter[str] = Counter()
    ours_missed: Counter[str] = Counter()
    ds_missed: Counter[str] = Counter()
    for kind, secret, shaped in credentials():
        if not shaped:
            continue
        text = f"my key is {secret} ok"
        total[kind] += 1
        ours_missed[kind] += missed(secret, text, set(), redact_text(text, KEY))
        if ds is not None:
            ds_missed[kind] += missed(secret, text, ds(text), None)
    print("| credential kind | in corpus | tailreplay found | detect-secrets found |")
    print("|---|---:|---:|---:|")
    for kind, n in total.items():
        theirs = f"{n - ds_missed[kind]}" if ds is not None else "-"
        print(f"| {kind} | {n} | {n - ours_missed[kind]} | {theirs} |")
    n = sum(total.values())
    theirs = f"{n - sum(ds_missed.values())}" if ds is not None else "-"
    print(f"| **all** | {n} | {n - sum(ours_missed.values())} | {theirs} |")
    print()


def false_positives(ds: Callable[[str], set[str]] | None) -> None:
    print("| benign class | values | tailreplay changed | detect-secrets flagged |")
    print("|---|---:|---:|---:|")
    for cls, values in benign().items():
        changed = sum(redact_text(v, KEY) != v for v in values)
        flagged = f"{sum(bool(ds(v)) for v in values)}" if ds is not None else "-"
        print(f"| {cls} | {len(values)} | {changed} | {flagged} |")
    print()


# Prose nobody wrote for this benchmark: the GPL as Debian installs it.
LICENCE = Path("/usr/share/common-licenses/GPL-3")


def throughput(ds: Callable[[str], set[str]] | None) -> None:
    rng = random.Random(1)
    dense = " ".join(rng.choice(PROMPT.split(" ")) for _ in range(800))[:4000]
    texts = [("prompt punctuation", dense)]
    if LICENCE.exists():
        texts.append(("licence prose", LICENCE.read_text()[8000:12000]))
    print("| redaction of a 4 KB chat request | bodies/s | µs a body |")
    print("|---|---:|---:|")
    for label, text in texts:
        doc = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 256}
        body = json.dumps(doc).encode()
        rows = [(f"tailreplay redact_body, {label}", partial(redact_body, body, KEY))]
        if ds is not None:
            rows.append((f"detect-secrets plugins (finding only), {label}", partial(ds, text)))
        for name, work in rows:
            r = _rate(work)
            print(f"| {name} | {r:,.0f} | {1e6 / r:,.0f} |")
    print()


def _rate(work: Callable[[], object], n: int = 200) -> float:
    """Calls a second, the median of 5 runs of ``n``."""
    runs = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(n):
            work()
        runs.append(n / (time.perf_counter() - began))
    return statistics.median(runs)


_CREDENTIAL_MASK = re.compile(r"\[(?:SECRET|KEY|BEARER|BASIC|COOKIE|USERINFO):fp:")
_PERSONAL_MASK = re.compile(r"\[(?:EMAIL|PHONE|CARD):fp:")


def _read(paths: list[str]) -> list[tuple[str, str]]:
    out = []
    for path in paths:
        try:
            out.append((path, Path(path).read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return out


def outside_text() -> None:
    """Each file sent whole as a prompt: how many come back changed, and why."""
    stdlib = sysconfig.get_paths()["stdlib"]
    modules = [
        p
        for p in sorted(glob.glob(f"{stdlib}/**/*.py", recursive=True))
        if "site-packages" not in p and "/test/" not in p and "/tests/" not in p
    ]
    docs = [
        p
        for p in sorted(glob.glob("/usr/share/common-licenses/*"))
        + sorted(glob.glob("/usr/share/doc/**/*", recursive=True))
        if Path(p).is_file() and not p.endswith((".gz", ".png", ".jpg", ".svg", ".gif"))
    ]
    print("| outside text, each file a prompt | files | credential masked | personal data "
          "masked | no longer parses |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for label, files, code in (
        ("Python stdlib modules", modules, True),
        ("/usr/share docs", docs, False),
    ):
        texts = _read(files)
        outs = [(text, redact_text(text, KEY)) for _, text in texts]
        credential = sum(bool(_CREDENTIAL_MASK.search(out)) for _, out in outs)
        personal = sum(bool(_PERSONAL_MASK.search(out)) for _, out in outs)
        broken = "-"
        if code:
            broken = str(sum(out != text and not _parses(out) for text, out in outs))
        print(f"| {label} | {len(texts):,} | {credential} ({credential / len(texts):.1%}) | "
              f"{personal} | {broken} |")  # fmt: skip
    print()


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def main() -> None:
    ds = detect_secrets_finder()
    print(f"corpus: {len(credentials())} credentials, {sum(map(len, benign().values()))} benign")
    print()
    recall(ds)
    false_positives(ds)
    outside_text()
    throughput(ds)


if __name__ == "__main__":
    main()
