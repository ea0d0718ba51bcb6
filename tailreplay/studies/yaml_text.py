"""Kubernetes objects as block-style YAML, written by hand: PyYAML is no dependency of
the package (``tailreplay deploy job`` prints its Job with it)."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["to_yaml"]

# Strings that a YAML parser could read as something else (numbers, booleans, "a: b")
# are JSON-quoted, which YAML reads as the same string.
_PLAIN = re.compile(r"(?:[A-Za-z_/$]|--?[A-Za-z])[A-Za-z0-9_./$()=-]*")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})


def to_yaml(value: dict[str, Any], *, comment: str = "") -> str:
    """A Kubernetes object as block-style YAML, after ``comment`` as # lines.

    >>> to_yaml({"kind": "Job", "spec": {"completions": 2}})
    'kind: Job\\nspec:\\n  completions: 2\\n'
    """
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    return "\n".join([*lines, *_block(value, 0)]) + "\n"


def _block(value: dict[str, Any] | list[Any], indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                out += [f"{pad}{_scalar(key)}:", *_block(item, indent + 2)]
            else:
                out.append(f"{pad}{_scalar(key)}: {_scalar(item)}")
        return out
    for item in value:
        if isinstance(item, dict | list) and item:
            first, *rest = _block(item, indent + 2)
            out += [f"{pad}- {first[indent + 2 :]}", *rest]
        else:
            out.append(f"{pad}- {_scalar(item)}")
    return out


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) else "[]"
    if not isinstance(value, str):
        raise TypeError(f"no YAML for {type(value).__name__}")
    if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return _UNPRINTABLE.sub(_escape, json.dumps(value, ensure_ascii=False))


# Beyond ASCII, as YAML's escapes: YAML reads some characters JSON leaves alone as
# line breaks (U+0085, U+2028), and does not pair JSON's surrogate escapes.
_UNPRINTABLE = re.compile("[^\\x20-\\x7e]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
