"""Figures over records, recorded or replayed: the one definition of every per-request
metric, an archive's summary statistics, and a replay's verdict on its own health."""
