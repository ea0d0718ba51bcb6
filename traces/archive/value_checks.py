"""Checks of one header value's type and range, shared by the header's definitions
(``replay_header.py``) and the validator (``validate.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["Check", "is_str", "is_strs", "number"]

Check = Callable[[Any], bool]


def number(lo: float, hi: float) -> Check:
    """A finite int or float in lo..hi (never a bool, NaN or an infinity)."""
    return lambda v: type(v) in (int, float) and math.isfinite(v) and lo <= v <= hi


def is_str(v: Any) -> bool:
    return type(v) is str


def is_strs(v: Any) -> bool:
    """An array of str (a list as msgpack reads it)."""
    return type(v) is list and all(type(s) is str for s in v)
