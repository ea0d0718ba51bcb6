"""``python -m tailreplay.sim`` is ``tailreplay sim``."""

from tailreplay.sim_cli import main

main()
