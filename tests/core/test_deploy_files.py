"""The image's build context and Dockerfile: .dockerignore sends what `pip wheel .`
reads and leaves out virtual environments, history, caches and outputs.

.dockerignore is matched here as Docker matches it (moby's patternmatcher): one
pattern a line, `*` and `?` within a path segment, `**` across segments, `!` lets
back in what an earlier line left out, the last matching line decides, and a path
is left out when it or a folder above it is.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import pytest

from tests.helpers import REPO


def _regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + "[" + pattern[i + 1 : end].replace("!", "^", 1) + "]", end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _patterns() -> list[tuple[bool, str, re.Pattern[str]]]:
    """(lets back in, text, regex) for each line of .dockerignore."""
    out = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        text = os.path.normpath(line.lstrip("!").lstrip("/"))
        out.append((negated, text, _regex(text)))
    return out


PATTERNS = _patterns()


def left_out(path: str) -> bool:
    parts = path.split("/")
    prefixes = ["/".join(parts[: k + 1]) for k in range(len(parts))]
    out = False
    for negated, _, regex in PATTERNS:
        if any(regex.fullmatch(p) for p in prefixes):
            out = not negated
    return out


def build_context() -> list[str]:
    """Every file of this checkout that `docker build .` would send."""
    kept = []
    for folder, dirs, files in os.walk(REPO):
        rel = Path(folder).relative_to(REPO).as_posix()
        rel = "" if rel == "." else rel + "/"
        # A folder left out is skipped unless a later line could let something in it back.
        dirs[:] = [
            d
            for d in dirs
            if not left_out(rel + d)
            or any(neg and text.startswith(rel + d + "/") for neg, text, _ in PATTERNS)
        ]
        kept += [rel + f for f in files if not left_out(rel + f)]
    return kept


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".venv/lib/python3.11/site-packages/numpy/__init__.py",
        ".venv-phoenix/bin/phoenix",
        ".git/HEAD",
        ".git/objects/pack/pack-1.pack",
        ".typecheck/tailreplay/proxy",
        ".pytest_cache/v/cache/nodeids",
        ".mypy_cache/3.11/cache.db",
        ".ruff_cache/CACHEDIR.TAG",
        ".hypothesis/examples/x",
        "tailreplay.egg-info/PKG-INFO",
        "build/lib/tailreplay/__init__.py",
        "traces/__pycache__/reader.cpython-311.pyc",
        "tailreplay/cli/__pycache__/deploy.cpython-311.pyc",
        "traces/_colscan.cpython-311-x86_64-linux-gnu.so",
        "demo-out/capture-report.html",
        "replays/replay-20261201T090000Z.msgpack",
        "captures/capture-20261201T090000Z-vm-1-0000.msgpack",
        "out/x",
        "tests/core/test_deploy.py",
        "bench/replay.py",
        "docs/deploy.md",
    ],
)
def test_the_build_context_leaves_out(path: str) -> None:
    assert left_out(path)


def _needed_by_pip() -> list[str]:
    """What `pip wheel .` reads: the build files, the readme and licence files, every
    package folder, the package data and the C extension's source."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    needed = ["pyproject.toml", "setup.py", project["project"]["readme"], "LICENSE", "NOTICE"]
    needed += re.findall(r'"([\w/]+\.c)"', (REPO / "setup.py").read_text())
    folders = setuptools["package-dir"]

    def folder(package: str) -> str:
        """Where a package's files are: its longest mapped prefix's folder, and the rest."""
        prefix = max((p for p in folders if package == p or package.startswith(p + ".")), key=len)
        rest = package[len(prefix) :].lstrip(".").replace(".", "/")
        return "/".join(filter(None, [folders[prefix], rest]))

    for package in setuptools["packages"]:
        needed.append(folder(package) + "/__init__.py")
    for package, globs in setuptools.get("package-data", {}).items():
        needed += [f"{folder(package)}/{g}" for g in globs]
    return needed


def test_the_build_context_keeps_what_pip_reads() -> None:
    needed = _needed_by_pip()
    assert "traces/archive/_colscan.c" in needed and "traces/peak.msgpack" in needed
    assert "traces/text/provider_formats.json" in needed
    assert "tailreplay/cli/__init__.py" in needed and "proxy/__init__.py" in needed
    assert all((REPO / path).exists() for path in needed)
    assert [path for path in needed if left_out(path)] == []


def test_this_checkout_sends_its_sources_and_no_environment() -> None:
    kept = build_context()
    assert not [p for p in kept if p.startswith((".venv", ".git/", "tests/"))]
    assert not [p for p in kept if "__pycache__" in p or p.endswith((".pyc", ".so"))]
    for folder in ("tailreplay", "traces", "proxy", "replayer", "exporters", "sim", "report"):
        sources = {
            p.relative_to(REPO).as_posix()
            for p in (REPO / folder).rglob("*.py")
            if "__pycache__" not in p.parts
        }
        assert sources <= set(kept), folder
    size = sum((REPO / p).stat().st_size for p in kept)
    assert size < 50 * 2**20  # the sample archive and the sources; never an environment


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in (raw.strip() for raw in joined.splitlines())
        if line and not line.startswith("#")
    ]


def test_the_image_runs_tailreplay_as_nobody_without_a_compiler() -> None:
    steps = _instructions((REPO / "deploy" / "Dockerfile").read_text())
    stages = [i for i, (op, _) in enumerate(steps) if op == "FROM"]
    final = steps[stages[-1] :]
    assert len(stages) == 2 and "AS build" in steps[stages[0]][1]
    assert ("USER", "65534:65534") in final  # the manifests' runAsUser
    entrypoint = [json.loads(arg) for op, arg in final if op == "ENTRYPOINT"]
    assert entrypoint == [["tailreplay"]]
    assert not [arg for op, arg in final if op == "RUN" and "gcc" in arg]
    assert not [arg for op, arg in final if op == "COPY" and not arg.startswith("--from=")]
