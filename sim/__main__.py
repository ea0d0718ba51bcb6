"""``python -m tailreplay.sim`` is ``tailreplay sim`` (an entry point: it imports the CLI).

Only the ``sim`` command is loaded, not the whole command group: ``capacity`` and
``validate-model`` start a fresh simulator for every trial, and the other commands'
imports were a fifth of its start."""

import sys

from tailreplay.cli.handling import run_standalone, setup_logging
from tailreplay.cli.sim import sim

setup_logging(verbose=False)
run_standalone(sim, sys.argv[1:], "tailreplay sim")
