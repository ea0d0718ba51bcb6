"""The layout holds: imports point down the layers, and modules stay small.

Layers (docs/architecture.md), lowest first; a module may import its own package
and any package on a lower layer, never one beside or above it:

    0  tailreplay (core: errors, units, OpenAI-API facts, ...)
    1  traces
    2  proxy, replayer, sim, exporters, report
    3  tailreplay.studies (one replay composed, capacity search, validate-model)
    4  tailreplay.cli and every __main__.py, and tailreplay.api (entry points, which
       nothing imports, and which do not import each other)

Functions are held small by ruff's mccabe check (C901, ``pyproject.toml``), not here.

Read with ast, so lazy imports inside functions count as much as top-level ones.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import REPO

FOLDERS = ("traces", "proxy", "replayer", "sim", "exporters", "report")
LAYER = {"core": 0, "traces": 1, "proxy": 2, "replayer": 2, "sim": 2, "exporters": 2,
         "report": 2, "studies": 3, "api": 4, "cli": 4}  # fmt: skip
MAX_MODULE_LINES = 800
"""Lines of a module as ``ruff format`` writes it (``make check`` holds the format):
room for one concept whole (docs/architecture.md, "When to split a module")."""
MAX_FMT_SKIPS = 10
"""``# fmt: skip`` markers in the product: only where a table reads better aligned."""


def _modules() -> Iterator[tuple[Path, str]]:
    """Every product module with its import name."""
    for path in sorted((REPO / "tailreplay").rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        yield path, ".".join(rel.parts).removesuffix(".__init__")
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO / folder).with_suffix("")
            name = ".".join(("tailreplay", folder, *rel.parts)).removesuffix(".__init__")
            yield path, name


def _package(module: str) -> str:
    """The layout package of an import name: core, cli, or one of FOLDERS."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "cli"
    if len(parts) > 1 and (parts[1] in FOLDERS or parts[1] in ("cli", "studies", "api")):
        return parts[1]
    return "core"


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for path, module in _modules():
        here = _package(module)
        for line, target in _imports(path):
            if target != "tailreplay" and not target.startswith("tailreplay."):
                continue
            there = _package(target)
            if there != here and LAYER[there] >= LAYER[here]:
                wrong.append(f"{path.relative_to(REPO)}:{line} ({here}) imports {target} ({there})")
    assert not wrong, "\n".join(wrong)


def _targets(path: Path, names: set[str]) -> set[str]:
    """The product modules ``path`` imports anywhere: at module level, inside functions
    and under ``if TYPE_CHECKING:``. ``from a.b import c`` names the submodule ``a.b.c``
    when there is one, else the module ``a.b``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{alias.name}" for alias in node.names}
            found.update(subs & names)
            if node.module in names and not subs <= names:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in names)
    return found


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import one another round a loop: the strongly connected
    components of more than one module, or of one that imports itself (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1 or node in graph[node]:
                loops.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return loops


def test_no_module_imports_itself_back() -> None:
    """No loop among product modules, counting every import: one closed only by a lazy
    or ``TYPE_CHECKING`` import is still two modules that cannot be read, tested or
    moved one without the other."""
    paths = {module: path for path, module in _modules()}
    graph = {module: _targets(path, set(paths)) for module, path in paths.items()}
    wrong = [
        "a loop of " + ", ".join(f"{a} -> {b}" for a in loop for b in sorted(graph[a]) if b in loop)
        for loop in sorted(tuple(loop) for loop in _loops(graph))
    ]
    assert not wrong, "\n".join(wrong)


def test_modules_stay_small() -> None:
    over = [
        f"{module}: {lines} lines"
        for path, module in _modules()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not over, "split each by concern:\n" + "\n".join(over)


SHARED_NAMES = {
    "metrics.py": {"proxy/metrics.py", "replayer/metrics.py", "sim/metrics.py"},
    "config.py": {"proxy/config.py", "replayer/config.py"},
    "settings.py": {"proxy/settings.py", "replayer/settings.py", "sim/settings.py"},
    "server.py": {"proxy/server.py", "sim/server.py"},
    "replay.py": {"tailreplay/cli/replay.py", "tailreplay/studies/replay.py"},
    "capacity.py": {"tailreplay/cli/capacity.py", "tailreplay/studies/capacity.py"},
}
"""Names a module shares on purpose: docs/architecture.md, "Names shared on purpose"."""


def test_no_two_modules_share_a_name_unless_the_docs_say_why() -> None:
    by_name: dict[str, set[str]] = {}
    for path, _ in _modules():
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(path.name, set()).add(path.relative_to(REPO).as_posix())
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert shared == SHARED_NAMES
    documented = (REPO / "docs/architecture.md").read_text()
    assert all(f"`{name}`" in documented for name in SHARED_NAMES)


def test_lines_are_not_packed_to_pass_the_gates() -> None:
    """A ``# fmt: skip`` keeps lines joined that ruff would split: kept only for
    aligned tables, each with its reason on the line above."""
    skips = [
        f"{path.relative_to(REPO)}:{n}"
        for path, _ in _modules()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "fmt: skip" in line
    ]
    assert len(skips) <= MAX_FMT_SKIPS, "\n".join(skips)


def test_the_checks_see_every_package() -> None:
    """A package the walk missed would pass every check above unseen."""
    seen = {_package(module) for _, module in _modules()}
    assert seen == set(LAYER)


def test_every_package_is_in_the_wheel() -> None:
    """pyproject.toml lists packages by hand (the tree maps folders to tailreplay.*):
    a package missing there installs from a clone but not from a wheel."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {v: k for k, v in config["package-dir"].items()}
    found = set()
    for init in REPO.glob("*/**/__init__.py"):
        rel = init.parent.relative_to(REPO)
        top = rel.parts[0]
        if top in folders:
            found.add(".".join([folders[top], *rel.parts[1:]]))
    assert found == set(config["packages"])
