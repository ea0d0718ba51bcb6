"""How a bursty (MMPP) model reaches a rate other than its own, by name: ``users``
(``Mmpp.scaled``: more or fewer independent users, as bursty) or ``periods``
(``periods.conditioned``: the recording's own periods at that rate, its busy states
more often). Apart from the models, so that the command line names them without
importing numpy."""

from __future__ import annotations

__all__ = ["PERIODS", "SCALINGS", "USERS"]

USERS, PERIODS = "users", "periods"
SCALINGS = (USERS, PERIODS)
