"""The SLO gate's data in a report: the matrix of objectives, the scopes judged
apart, the one verdict, and what a run cut short holds. TypedDicts, as every part of
a report (``report/model.py``, which names them too)."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

__all__ = ["Partial", "ScopeRow", "SloCell", "SloMatrix", "SloRow", "SloScope", "SloVerdict"]


class SloCell(TypedDict):
    """One objective on one column; ``ok`` is None when there is nothing to judge."""

    value: float | None
    limit: float | None
    ok: bool | None


class SloRow(TypedDict):
    objective: str
    """As given on the command line."""
    weight: float
    cells: dict[str, SloCell]
    """Keyed by column: ``overall`` and each bucket's range."""


class ScopeRow(TypedDict):
    """One class (``model=a``) or window (``60-120 s``) of a scoped SLO."""

    scope: str
    requests: int
    goodput: float | None
    """Share of its requests that succeeded and met every absolute per-request limit."""
    cells: dict[str, SloCell]
    """Keyed by objective, as given."""
    passed: bool | None
    """None: not judged (a window with too few requests)."""


class SloScope(TypedDict):
    """``--slo-by`` or ``--slo-window``: every class or window judged on its own."""

    name: str
    rows: list[ScopeRow]
    passed: bool
    failed: list[str]
    """The classes or windows that missed an objective."""
    spread: dict[str, list[float]]
    """Per objective, [lowest, highest] value across the judged rows."""


class SloMatrix(TypedDict):
    """Every objective against the overall column and every bucket, and the verdict."""

    columns: list[str]
    rows: list[SloRow]
    score: float | None
    """None without objectives."""
    min_score: float
    passed: bool
    """The overall score reached min_score, and every scope passed."""
    scopes: NotRequired[list[SloScope]]


class Partial(TypedDict):
    """A replay cut short (``report/write.py``'s ``cut_short``): how much of its
    schedule it holds."""

    scheduled: int
    due: int
    """Requests due before it stopped (first attempts, dropped ones included)."""
    unsent: int


class SloVerdict(TypedDict):
    """The SLO gate's one verdict (``report/verdict.py``): ``report["verdict"]``, and
    ``slo`` in a run's ``--json`` summary."""

    state: Literal["pass", "fail", "not_judged"]
    reason: str
    """Why not judged; what was missed; or the score that passed."""
    passed: bool | None
    """None when it was not judged."""
    judged: bool
    score: float | None
    min_score: float
    missed: list[str]
    """The objectives missed overall."""
    failed: dict[str, list[str]]
    """Per ``--slo-by`` or ``--slo-window`` scope, the classes or windows that missed one."""
