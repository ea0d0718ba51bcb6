"""Provider credential formats for redaction, from gitleaks' rule set, as data.

Reads gitleaks' ``config/gitleaks.toml`` (a list of rules, each a regular expression
in Go's RE2 syntax, the keywords one of which every match holds, and an entropy
floor) and writes ``traces/text/provider_formats.json``: each rule's facts with
its expression rewritten for Python's ``re`` (RE2 applies a flag group ``(?i)``
met mid-expression to the rest of its group, Python only at the start; RE2's ``\\z``
is Python's ``\\Z``; POSIX classes and a ``[`` inside a class are spelled out).

Refresh (the version is recorded in the file; docs/proxy.md, "Redaction"):

    fetch gitleaks/gitleaks, then
    git -C <its checkout> show HEAD:config/gitleaks.toml > /tmp/gitleaks.toml
    .venv/bin/python scripts/provider_formats.py /tmp/gitleaks.toml \\
        --version "$(git -C <its checkout> describe --tags)"

Left out: ``generic-api-key`` (any assignment to a name holding "key", "token",
"secret"...: the name rule in ``traces/text/secret_names.py`` judges those, with
the code and prose it must leave alone in mind) and rules that match file paths
only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "traces" / "text" / "provider_formats.json"
LEFT_OUT = {"generic-api-key"}
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


def convert(rules: list[dict[str, object]]) -> list[dict[str, object]]:
    formats = []
    for rule in rules:
        rid = str(rule["id"])
        if rid in LEFT_OUT or "regex" not in rule:
            continue
        pattern = to_python(str(rule["regex"]))
        re.compile(pattern)  # a rule Python cannot read stops the refresh
        allow: list[str] = []
        stopwords: list[str] = []
        for entry in rule.get("allowlists", []) or []:  # type: ignore[attr-defined]
            if entry.get("regexTarget", "secret") == "secret":
                allow += [to_python(r) for r in entry.get("regexes", [])]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("toml", type=Path, help="gitleaks' config/gitleaks.toml")
    parser.add_argument("--version", required=True, help="gitleaks' `git describe --tags`")
    parser.add_argument("-o", "--out", type=Path, default=OUT)
    args = parser.parse_args()
    config = tomllib.loads(args.toml.read_text())
    formats = convert(config["rules"])
    document = {
        "source": "gitleaks config/gitleaks.toml (https://github.com/gitleaks/gitleaks, MIT)",
        "version": args.version,
        "global_allow": [to_python(r) for r in config.get("allowlist", {}).get("regexes", [])],
        "global_stopwords": config.get("allowlist", {}).get("stopwords", []),
        "formats": formats,
    }
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{len(formats)} formats written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
