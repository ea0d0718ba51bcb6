"""Provider credential formats for redaction, from two public rule sets, as data.

Reads gitleaks' ``config/gitleaks.toml`` (MIT: rules each a regular expression in
Go's RE2 syntax, the keywords one of which every match holds, and an entropy
floor) and Nosey Parker's built-in rules (Apache 2.0: YAML files, each rule an
expression in Rust's syntax with examples of what it finds), and writes
``traces/text/provider_formats.json``: each rule's facts, its expression in RE2's
syntax (redaction runs them with RE2, in time linear in the text: these rule sets
are written for linear engines, and Python's backtracking one takes minutes on
some of them, ``(?:\\s*.*\\s*){0,3}``); Nosey Parker's verbose ones are written
compact, as RE2 has no ``(?x)``. ``to_python`` spells an expression for Python's
``re`` (RE2 applies a flag group ``(?i)`` met mid-expression to the rest of its
group, Python only at the start; RE2's ``\\z`` is Python's ``\\Z``; POSIX classes and
a ``[`` inside a class are spelled out), for the tests that draw examples from the
expressions and for finding a Nosey Parker rule's keyword: the longest literal its
every match holds (or one per branch). Its examples are kept for the tests.

Refresh (the versions are recorded in the file; docs/proxy.md, "Redaction"):

    fetch gitleaks/gitleaks and praetorian-inc/noseyparker, then
    git -C <gitleaks> show HEAD:config/gitleaks.toml > /tmp/gitleaks.toml
    git -C <noseyparker> archive HEAD crates/noseyparker/data/default/builtin/rules \\
        | tar -x -C /tmp/np
    .venv/bin/python scripts/provider_formats.py /tmp/gitleaks.toml \\
        --version "$(git -C <gitleaks> describe --tags)" \\
        --noseyparker /tmp/np/crates/noseyparker/data/default/builtin/rules \\
        --noseyparker-version "$(git -C <noseyparker> describe --tags)"

Left out: gitleaks' ``generic-api-key`` and Nosey Parker's generic rules (any
assignment to a name holding "key", "token", "secret"...: the name rule in
``traces/text/secret_names.py`` judges those, with the code and prose it must
leave alone in mind), its rules for identifiers and hashes (no credential: an
account id, a bucket's name, a password's hash), rules without a literal to
gate them by, and rules that match file paths only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path
from re import _constants as C
from re import _parser as P
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "traces" / "text" / "provider_formats.json"
EXAMPLES = ROOT / "tests" / "data" / "provider_formats_examples.json"
"""Nosey Parker's examples of each rule, for the tests (not shipped)."""
LEFT_OUT = {"generic-api-key"}
_NP_SECRET_GROUP = {"np.postgres.1": 2, "np.mongodb.1": 2}
"""Nosey Parker's last group is the secret (after a host, a user, an account), but a
database URI's groups are its user, its password and then its host."""
_CODE_END = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
_PROSE_END = r"""(?:[^A-Za-z0-9_+=-]|$)"""
"""gitleaks ends most rules where code ends a value (a quote, a space, ``;``); in
prose, Markdown, a URL or text in any script it ends at any character a token is not
made of ("the key ltai…, is revoked", ``**hvs.…**``, ``/v1/keys/…/x``, CJK text's
full-width colon and full stop).
The rule's body has its exact length and alphabet either way."""
_POSIX = {"[:alnum:]": "A-Za-z0-9", "[:alpha:]": "A-Za-z", "[:digit:]": "0-9"}


def _class_end(pattern: str, start: int) -> int:
    """The index just past the character class opening at ``start``."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1  # a ']' first in a class is a literal
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern.startswith("[:", i):
            i = pattern.index(":]", i) + 2
            continue
        if pattern[i] == "]":
            return i + 1
        i += 1
    raise ValueError(f"unclosed class in {pattern!r}")


def _class(text: str) -> str:
    """One character class in Python's spelling: POSIX names expanded, a literal ``[``
    escaped (Python warns of a nested set)."""
    for name, spelled in _POSIX.items():
        text = text.replace(name, spelled)
    body = text[1:-1].replace("[", "\\[").replace("\\\\[", "\\[")
    return "[" + body + "]"


def _group_end(pattern: str, start: int) -> int:
    """The index of the ``)`` that closes the group ``start`` is in (or the end)."""
    depth, i = 0, start
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(pattern, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return len(pattern)


def to_python(pattern: str) -> str:
    """An RE2 expression in Python's ``re`` spelling (see the module docstring)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append("\\Z" if pattern[i : i + 2] == "\\z" else pattern[i : i + 2])
            i += 2
        elif c == "[":
            end = _class_end(pattern, i)
            out.append(_class(pattern[i:end]))
            i = end
        elif pattern.startswith("(?i)", i) and i > 0:
            end = _group_end(pattern, i + 4)
            out.append("(?i:" + to_python(pattern[i + 4 : end]) + ")")
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


def re2_bounded(pattern: str) -> str:
    """``pattern`` with repeats bounded at RE2's limit of 1,000 (``{20,1024}``)."""
    return re.sub(r"\{(\d+),(\d+)\}", lambda m: f"{{{m[1]},{min(int(m[2]), 1000)}}}", pattern)


def _check(pattern: str) -> None:
    """Raise unless both RE2 (what redaction runs) and Python (what the tests draw
    examples with) read ``pattern``."""
    import re2  # the runtime's engine

    try:
        re2.compile(pattern)
    except re2.error as exc:
        raise ValueError(f"RE2 cannot read {pattern!r}: {exc}") from None
    re.compile(to_python(pattern))


def convert(rules: list[dict[str, object]]) -> list[dict[str, object]]:
    formats = []
    for rule in rules:
        rid = str(rule["id"])
        if rid in LEFT_OUT or "regex" not in rule:
            continue
        pattern = re2_bounded(str(rule["regex"])).replace(_CODE_END, _PROSE_END)
        _check(pattern)  # a rule RE2 (or the tests' Python) cannot read stops the refresh
        allow: list[str] = []
        stopwords: list[str] = []
        for entry in rule.get("allowlists", []) or []:  # type: ignore[attr-defined]
            if entry.get("regexTarget", "secret") == "secret":
                allow += [str(r) for r in entry.get("regexes", [])]
            stopwords += entry.get("stopwords", [])
        formats.append(
            {
                "id": rid,
                # How a mask names what it hides: a password or a command line's user
                # and password is a SECRET, as the name rule calls those; else a KEY.
                "kind": "SECRET" if "password" in rid or rid.startswith("curl-") else "KEY",
                "regex": pattern,
                "keywords": [str(k).lower() for k in rule.get("keywords", [])],  # type: ignore[attr-defined]
                "entropy": float(rule.get("entropy", 0.0)),  # type: ignore[arg-type]
                "secret_group": int(rule.get("secretGroup", 0)),  # type: ignore[call-overload]
                "allow": allow,
                "stopwords": stopwords,
            }
        )
    return formats


def _literal_runs(tree: Any, ignore_case: bool) -> list[list[str]]:
    """Alternatives of literals one of which every match of ``tree`` holds: each a list
    of choices (a branch gives several)."""
    found: list[list[str]] = []
    run: list[str] = []

    def cut() -> None:
        if run:
            found.append(["".join(run).lower() if ignore_case else "".join(run)])
            run.clear()

    for op, av in tree:
        if op is C.LITERAL:
            run.append(chr(av))
            continue
        if op is C.SUBPATTERN:
            _, add, remove, sub = av
            inner = _literal_runs(sub, (ignore_case or bool(add & re.I)) and not remove & re.I)
            if len(inner) == 1 and len(inner[0]) == 1 and sub and sub[0][0] is C.LITERAL:
                run.append(inner[0][0])  # a group of literals continues the run
                continue
            cut()
            found += inner
            continue
        cut()
        if op is C.BRANCH:
            choices = [_best(_literal_runs(alt, ignore_case)) for alt in av[1]]
            if all(choices):
                found.append([c[0] for c in choices if c])
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[0] >= 1:
            found += _literal_runs(av[2], ignore_case)
    cut()
    return found


def _best(runs: list[list[str]]) -> list[str] | None:
    """The alternative whose shortest choice is longest (at least 3 characters)."""
    good = [r for r in runs if min(len(c) for c in r) >= 3]
    return max(good, key=lambda r: min(len(c) for c in r)) if good else None


def keywords_of(pattern: str) -> list[str]:
    """What gates ``pattern``: the longest literal (or one per branch) its every match
    holds, lower-cased; none when it has no such literal of 3 characters."""
    parsed = P.parse(pattern)
    best = _best(_literal_runs(parsed, bool(parsed.state.flags & re.I)))
    return sorted({c.lower() for c in best}) if best else []


def compact(pattern: str) -> str:
    """A verbose expression (``(?x)``: whitespace and ``#`` comments ignored) written
    without that mode, which RE2 does not have; other patterns as they are."""
    if not re.search(r"\(\?[a-z]*x[a-z]*[):]", pattern):
        return pattern
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c.isspace():
            i += 1
            continue
        elif c == "#":
            i = pattern.find("\n", i) % (len(pattern) + 1) or len(pattern)
            continue
        elif pattern.startswith("(?#", i):  # a comment group
            i = pattern.index(")", i) + 1
            continue
        elif (flags := re.match(r"\(\?([a-z]*)([):])", pattern[i:])) and "x" in flags[1]:
            rest = flags[1].replace("x", "")
            if rest or flags[2] == ":":
                out.append(f"(?{rest}{flags[2]}")
            i += len(flags[0])
            continue
        out.append(c)
        i += 1
    return "".join(out)


def noseyparker(folder: Path) -> list[dict[str, object]]:
    import yaml  # the test extras: this script runs in the project's environment

    formats = []
    for path in sorted(folder.glob("*.yml")):
        for rule in yaml.safe_load(path.read_text()).get("rules", []):
            categories = set(rule.get("categories", []))
            if "secret" not in categories or categories & {"generic", "hashed"}:
                continue
            pattern = re2_bounded(compact(rule["pattern"]))
            try:
                _check(pattern)
            except (re.error, ValueError):
                continue  # a Rust-only construct: the rule is left out
            words = keywords_of(to_python(pattern))
            if not words:
                continue
            formats.append(
                {
                    "id": rule["id"],
                    "kind": "SECRET" if "password" in rule["id"] else "KEY",
                    "regex": pattern,
                    "keywords": words,
                    "entropy": 0.0,
                    "secret_group": _NP_SECRET_GROUP.get(rule["id"], -1),
                    "allow": [],
                    "stopwords": [],
                    "examples": [str(e) for e in rule.get("examples", [])],
                }
            )
    return formats


OWN: list[dict[str, object]] = [
    # Formats neither rule set has, written from their issuers' documented prefixes
    # and the lengths and alphabets of keys they issue (ranges, not one length): an
    # AWS session token opens on the base64 of its own header, a Google refresh token
    # on `1//0`, a Braintree access token on `access_token$`.
    {"id": "own.xai.1", "regex": r"\b(xai-[A-Za-z0-9]{60,100})\b", "keywords": ["xai-"]},
    {"id": "own.replicate.1", "regex": r"\b(r8_[A-Za-z0-9]{30,45})\b", "keywords": ["r8_"]},
    {
        "id": "own.langsmith.1",
        "regex": r"\b(lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10})\b",
        "keywords": ["lsv2_"],
    },
    {
        "id": "own.discord.1",
        "regex": r"(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/"
        r"[A-Za-z0-9_-]{60,70})",
        "keywords": ["/api/webhooks/"],
    },
    {"id": "own.stripe.1", "regex": r"\b(whsec_[A-Za-z0-9+/]{24,64})", "keywords": ["whsec_"]},
    {
        "id": "own.pinecone.1",
        "regex": r"\b(pcsk_[A-Za-z0-9]{4,8}_[A-Za-z0-9]{40,80})\b",
        "keywords": ["pcsk_"],
    },
    {"id": "own.supabase.1", "regex": r"\b(sbp_[a-f0-9]{40})\b", "keywords": ["sbp_"]},
    {"id": "own.mailgun.1", "regex": r"\b(key-[a-f0-9]{32})\b", "keywords": ["key-"]},
    {"id": "own.circleci.1", "regex": r"\b(CCIPAT_[A-Za-z0-9_]{30,80})\b", "keywords": ["ccipat_"]},
    {"id": "own.buildkite.1", "regex": r"\b(bkua_[A-Za-z0-9]{40})\b", "keywords": ["bkua_"]},
    {
        "id": "own.resend.1",
        "regex": r"\b(re_[A-Za-z0-9]{8}_[A-Za-z0-9]{20,32})\b",
        "keywords": ["re_"],
    },
    {"id": "own.notion.1", "regex": r"\b(ntn_[A-Za-z0-9]{40,60})\b", "keywords": ["ntn_"]},
    {
        "id": "own.airtable.1",
        "regex": r"\b(pat[A-Za-z0-9]{14}\.[a-f0-9]{64})\b",
        "keywords": ["pat"],
    },
    {"id": "own.figma.1", "regex": r"\b(figd_[A-Za-z0-9_-]{36,64})", "keywords": ["figd_"]},
    {
        "id": "own.hubspot.1",
        "regex": r"\b(pat-(?:na|eu|ap)[0-9]-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}"
        r"-[a-f0-9]{12})\b",
        "keywords": ["pat-na", "pat-eu", "pat-ap"],
    },
    {
        "id": "own.tailscale.1",
        "regex": r"\b(tskey-(?:auth|api|client|webhook|scim)-[A-Za-z0-9]{6,}-[A-Za-z0-9]{20,})",
        "keywords": ["tskey-"],
    },
    {"id": "own.contentful.1", "regex": r"\b(CFPAT-[A-Za-z0-9_-]{40,50})", "keywords": ["cfpat-"]},
    {
        "id": "own.mapbox.1",
        "regex": r"\b(sk\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,})",
        "keywords": ["sk.eyj"],
    },
    {"id": "own.google.1", "regex": r"(1//0[A-Za-z0-9_-]{40,})", "keywords": ["1//0"]},
    {
        "id": "own.aws.1",
        "regex": r"\b((?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdz)[A-Za-z0-9+/=]{100,})",
        "keywords": ["iqojb3jpz2lux2vj", "fwogzxivyxdz"],
    },
    {
        "id": "own.plaid.1",
        "regex": r"\b(access-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}"
        r"-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b",
        "keywords": ["access-sandbox-", "access-development-", "access-production-"],
    },
    {
        "id": "own.braintree.1",
        "regex": r"(access_token\$(?:production|sandbox)\$[0-9a-z]{16}\$[0-9a-f]{32})",
        "keywords": ["access_token$"],
    },
]


def own() -> list[dict[str, object]]:
    """``OWN`` in the file's shape, each checked as the rule sets' are."""
    formats = []
    for rule in OWN:
        _check(str(rule["regex"]))
        formats.append(
            {**rule, "kind": "KEY", "entropy": 3.0, "secret_group": 0, "allow": [], "stopwords": []}
        )
    return formats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("toml", type=Path, help="gitleaks' config/gitleaks.toml")
    parser.add_argument("--version", required=True, help="gitleaks' `git describe --tags`")
    parser.add_argument("--noseyparker", type=Path, help="Nosey Parker's builtin/rules folder")
    parser.add_argument("--noseyparker-version", default="")
    parser.add_argument("-o", "--out", type=Path, default=OUT)
    args = parser.parse_args()
    config = tomllib.loads(args.toml.read_text())
    formats = convert(config["rules"])
    sources = [f"gitleaks {args.version} (https://github.com/gitleaks/gitleaks, MIT)"]
    formats += own()
    sources.append("tailreplay's own, from issuers' documentation (scripts/provider_formats.py)")
    if args.noseyparker is not None:
        formats += noseyparker(args.noseyparker)
        sources.append(
            f"Nosey Parker {args.noseyparker_version} "
            "(https://github.com/praetorian-inc/noseyparker, Apache 2.0)"
        )
    document = {
        "sources": sources,
        "version": args.version,
        "global_allow": list(config.get("allowlist", {}).get("regexes", [])),
        "global_stopwords": config.get("allowlist", {}).get("stopwords", []),
        "formats": formats,
    }
    examples = {f["id"]: f.pop("examples") for f in formats if "examples" in f}
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    if examples:
        EXAMPLES.write_text(
            json.dumps({"source": sources[-1], "examples": examples}, indent=1) + "\n"
        )
    print(f"{len(formats)} formats written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
