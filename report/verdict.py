"""The one verdict of a report's SLO gate: pass, fail, or not judged with its reason.

The headline, the SLO table's title, the JSON (``report["verdict"]``, and ``replay
--json``'s ``slo``), the Python API and the exit code all read this one value, so no
view can say PASS where another says NOT JUDGED:

- **fail** when ``--slo-stop`` stopped the run on an objective it saw missed;
- **not judged** when what was measured is not the target under the recorded load:
  the run was cut short (``cut_short``, ``report/write.py``; ``--judge-partial``
  judges what was sent), the replaying client was the bottleneck (its dispatch lag
  P99 over ``--lag-limit``), not one objective had a request to be judged on (an
  objective without data among others that have it counts as missed), or objectives relative to the
  recording face a recorded archive none of whose requests the replay sent (it
  was replaced since, or is another recording);
- otherwise **pass** when the score reached ``--slo-min-score`` and every scope
  (``--slo-by``, ``--slo-window``) passed, else **fail**, naming what was missed.

The exit codes (README, "Exit codes"): 0 pass, 1 fail, 4 not judged.
"""

from __future__ import annotations

from typing import Literal

from tailreplay.errors import NotJudged, RunFailed
from tailreplay.report.model import Report, SloMatrix, SloVerdict

__all__ = ["fail_on_verdict", "judge"]


def judge(
    report: Report, slo: SloMatrix, *, judge_partial: bool = False, slo_stop: str | None = None
) -> SloVerdict:
    """The verdict of ``slo`` on the run ``report`` describes; ``judge_partial`` judges
    a run cut short on what it sent, ``slo_stop`` is the miss that stopped the run."""
    # An objective with nothing to judge counts as missed (an empty replay must not pass).
    missed = [r["objective"] for r in slo["rows"] if not r["cells"]["overall"]["ok"]]
    failed = {s["name"]: s["failed"] for s in slo.get("scopes", []) if s["failed"]}
    why_not = _not_judged(report, slo, judge_partial)
    state: Literal["pass", "fail", "not_judged"]
    if slo_stop is not None:
        state, reason = "fail", f"{slo_stop}; stopped (--slo-stop)"
    elif why_not is not None:
        state, reason = "not_judged", why_not
    elif slo["passed"]:
        state, reason = "pass", f"score {slo['score']:.2f}, needs {slo['min_score']:.2f}"
    else:
        state, reason = "fail", _missed(slo, missed, failed)
    return {
        "state": state,
        "reason": reason,
        "passed": None if state == "not_judged" else state == "pass",
        "judged": state != "not_judged",
        "score": slo["score"],
        "min_score": slo["min_score"],
        "missed": missed,
        "failed": failed,
    }


def _not_judged(report: Report, slo: SloMatrix, judge_partial: bool) -> str | None:
    """Why the run cannot be judged, or None."""
    partial = report.get("partial")
    if partial is not None and not judge_partial:
        return (
            f"the run was cut short: {partial['unsent']:,} of {partial['scheduled']:,} "
            f"scheduled requests were never sent (--judge-partial judges the "
            f"{partial['due']:,} due)"
        )
    if (unrelated := report.get("unrelated")) is not None:
        return unrelated
    client = report["client"]
    if client is not None and client["client_bound"]:
        return (
            f"the client was the bottleneck (dispatch lag P99 {client['lag_p99_ms']:.1f} ms "
            f"> {client['lag_limit_ms']:g} ms); the target did not see the recorded arrival "
            "process"
        )
    if all(r["cells"]["overall"]["ok"] is None for r in slo["rows"]):
        return "no objective had a request to judge"
    return None


def _missed(slo: SloMatrix, missed: list[str], failed: dict[str, list[str]]) -> str:
    scoped = [
        f"{name}: {', '.join(where[:5])}" + (" ..." if len(where) > 5 else "")
        for name, where in failed.items()
    ]
    score = slo["score"]
    if score is not None and score < slo["min_score"]:
        why = f"score {score:.2f} < {slo['min_score']:.2f} (missed: {', '.join(missed)})"
        return "; ".join([why, *scoped])
    return "; ".join(scoped) or "missed: " + ", ".join(missed)


def fail_on_verdict(verdict: SloVerdict | None) -> None:
    """Raise for a verdict that is not a pass: ``RunFailed`` (exit 1) when the SLO was
    missed, ``NotJudged`` (exit 4) when it could not be judged."""
    if verdict is None or verdict["state"] == "pass":
        return
    if verdict["state"] == "not_judged":
        raise NotJudged(f"SLO not judged: {verdict['reason']}")
    raise RunFailed(f"SLO failed: {verdict['reason']}")
