"""The ``tailreplay`` command line: the group, its console entry points, its commands.

Commands are thin: parse options (click types, ``options.py``), build a config,
call one library function, print, set the exit code. Errors from the library
(``TailreplayError``) become one line on stderr and the documented exit code;
click's own usage errors exit 2. The command modules never import this one:
it imports them and adds them to the group.
"""

from __future__ import annotations

import sys

import click

from tailreplay.cli.capacity import capacity
from tailreplay.cli.deploy import deploy
from tailreplay.cli.handling import HandledGroup, run_standalone, setup_logging
from tailreplay.cli.proxy import proxy
from tailreplay.cli.replay import replay
from tailreplay.cli.report import report
from tailreplay.cli.sim import sim
from tailreplay.cli.traces import traces
from tailreplay.cli.workload import fit, synth, validate_model
from tailreplay.version import __version__

__all__ = ["cli", "main", "replay_main"]


@click.group(cls=HandledGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tailreplay")
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail to stderr.")
def cli(verbose: bool) -> None:
    """Capture LLM API traffic and replay it with the same tail."""
    setup_logging(verbose)


for _command in (traces, sim, proxy, replay, report, capacity, deploy):
    cli.add_command(_command)
for _command in (fit, synth, validate_model):
    traces.add_command(_command)

# One example (or two) under every command's --help; `replay` has its own.
EXAMPLES = {
    "traces inspect": "tailreplay traces inspect capture.msgpack -n 3",
    "traces stats": "tailreplay traces stats captures/*.msgpack --json",
    "traces merge": "tailreplay traces merge captures/*.msgpack -o capture.msgpack",
    "traces upgrade": "tailreplay traces upgrade old.msgpack -o new.msgpack",
    "traces slice": "tailreplay traces slice capture.msgpack --from +5m --to +10m "
    "--status 2xx -o window.msgpack",
    "traces peak": "tailreplay traces peak capture.msgpack --window 5m -o peak.msgpack",
    "traces import": "tailreplay traces import azure AzureLLMInferenceTrace_conv.csv "
    "-o conv.msgpack",
    "traces export mooncake": "tailreplay traces export mooncake capture.msgpack -o trace.jsonl",
    "traces export jsonl": "tailreplay traces export jsonl capture.msgpack -o records.jsonl",
    "traces export raw": "tailreplay traces export raw results.msgpack -o raw.jsonl",
    "traces export otlp": "tailreplay traces export otlp capture.msgpack "
    "--otlp-endpoint http://127.0.0.1:4318",
    "traces fit": "tailreplay traces fit capture.msgpack -o model.json",
    "traces synth": "tailreplay traces synth model.json --duration 10m --scale 3x -o synth.msgpack",
    "traces validate-model": "tailreplay traces validate-model capture.msgpack --model model.json "
    "--window 30m --seeds 3 --speed 4x",
    "traces sample": "tailreplay traces sample peak -o peak.msgpack",
    "sim calibrate": "tailreplay sim calibrate results.msgpack -o profile.json --base fast",
    "proxy": "tailreplay proxy --upstream http://127.0.0.1:8000 --listen 0.0.0.0:8080 "
    "--out captures/",
    "capacity": "tailreplay capacity capture.msgpack --slo 'latency:p99<=2000ms' --require 2x "
    "--json cap.json",
    "report": "tailreplay report results.msgpack --html report.html "
    "--slo 'latency:p99<=2x,error_rate<=1%'",
    "deploy job": "tailreplay deploy job /archives/peak.msgpack --shards 4 --start-in 2m "
    "--target http://llm-staging:8000 --speed 2x",
}


def _with_example(group: click.Group, prefix: str = "") -> None:
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            _with_example(command, path + " ")
        elif path in EXAMPLES and not command.epilog:
            command.epilog = "\b\nExample:\n  " + EXAMPLES[path]


_with_example(cli)


def main() -> None:
    """The ``tailreplay`` console script (and ``python -m tailreplay``)."""
    cli(sys.argv[1:], prog_name="tailreplay")


def replay_main() -> None:
    """The ``replay`` console script: ``tailreplay replay`` under a shorter name."""
    setup_logging(verbose=False)
    run_standalone(replay, sys.argv[1:], "replay")
