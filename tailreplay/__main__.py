"""``python -m tailreplay`` is the ``tailreplay`` command."""

from tailreplay.cli import main

main()
