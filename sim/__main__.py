"""``python -m tailreplay.sim`` is ``tailreplay sim`` (an entry point: it imports the CLI)."""

from tailreplay.cli import sim_main

sim_main()
