"""The ``kvplan`` command: parse arguments, call the library, format the answer.

Every command prints one JSON object with ``--json`` and a readable table without it. Bad input
exits 2 with a one-line ``error: …`` on stderr. :mod:`kvplan.cli.app` holds the parser and the entry
point, :mod:`~kvplan.cli.arguments`, :mod:`~kvplan.cli.output` what the commands share, and one module
per command group the commands: :mod:`~kvplan.cli.budget`, :mod:`~kvplan.cli.ledger`,
:mod:`~kvplan.cli.capacity` (capacity, drift), :mod:`~kvplan.cli.load`, :mod:`~kvplan.cli.approve`
(approve, verify), :mod:`~kvplan.cli.gate`, :mod:`~kvplan.cli.fleet` (fleet plan, fleet gate).
Commands only parse, call the library and format: the decision is :func:`kvplan.plan.decide`'s.
"""

from kvplan.cli.app import COMMANDS, build_parser, main
from kvplan.cli.errors import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK, CliError
from kvplan.cli.output import print_json as _print_json  # tests/test_load.py checks it by this name

__all__ = [
    "COMMANDS",
    "EXIT_BAD_INPUT",
    "EXIT_FAIL",
    "EXIT_OK",
    "CliError",
    "_print_json",
    "build_parser",
    "main",
]
