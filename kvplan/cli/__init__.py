"""The ``kvplan`` command: parse arguments, call the library, format the answer.

Every command prints one JSON object with ``--json`` and a readable table without it; bad input exits 2
with one ``error: …`` line on stderr. :mod:`~kvplan.cli.common` holds what the commands share, and one
module per command group registers its subcommands with an ``add_<command>(sub)`` function that sets
``run`` (:data:`COMMANDS`, in ``--help`` order). A command module imports the library inside its ``run``
functions, so that ``kvplan --help`` and the light commands start without pandas or matplotlib. Commands
only parse, call the library and format: the decision is :func:`kvplan.plan.decide`'s.

>>> sorted(build_parser().parse_args(["drift", "--ref-free", "42GiB", "--ref-budget", "30GiB",
...     "--boot-free", "40.75GiB", "--guard", "0.5GiB"]).__dict__)[:3]
['block_bytes', 'boot_free', 'command']
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import orjson

from kvplan.cli.approve import add_approve, add_export, add_verify
from kvplan.cli.budget import add_budget
from kvplan.cli.capacity import add_capacity, add_drift
from kvplan.cli.common import (
    EXIT_BAD_INPUT,
    ExampleFormatter,
    examples,
    print_error,
    print_warnings,
    reader_warnings_into,
    unwritable_json,
)
from kvplan.cli.common import print_json as _print_json  # tests/test_load.py checks it by this name
from kvplan.cli.fleet import add_fleet
from kvplan.cli.gate import add_gate
from kvplan.cli.ledger import add_ledger
from kvplan.cli.load import add_load

#: Every subcommand's ``add_<command>(sub)``, in ``--help`` order.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_budget,
    add_ledger,
    add_capacity,
    add_drift,
    add_load,
    add_approve,
    add_verify,
    add_gate,
    add_export,
    add_fleet,
]


class _Version(argparse.Action):
    """``--version``: print ``kvplan VERSION`` and exit 0; the version is read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> NoReturn:
        from kvplan import __version__

        print(f"kvplan {__version__}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``error: kvplan budget: …`` and exit 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = _Parser(
        prog="kvplan",
        description="Safe, evidenced per-GPU KV-cache budgets from vLLM startup logs: read a launch's "
        "logs (ledger), size the budget (budget), approve it into an evidence bundle (approve), re-check it "
        "(verify) and gate a canary boot against it (gate). Each command explains itself: kvplan COMMAND "
        "--help; every flag is in docs/cli.md.",
        epilog=examples(
            [
                "kvplan ledger data/boots/four-rank/",
                "kvplan budget data/boots/four-rank/ --reserve 0.9GiB --model llama-3.1-70b --tp 4",
            ]
        ),
        formatter_class=ExampleFormatter,
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``kvplan`` command; returns the exit status (0 ok, 1 failed check, 2 bad input).

    The cyclic collector is paused for the command (the process is its own, unlike a notebook's kernel):
    its millions of small objects make no cycles, and each full collection walks them all (9 % of a 300 MB
    log's read)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run(build_parser().parse_args(argv))
    finally:
        if collecting:
            gc.enable()


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command, its errors as one line and exit 2, the warnings it left unsaid after."""
    notes: list[str] = []
    try:
        with reader_warnings_into(notes):  # what a command did not report itself
            return args.run(args)
    except BrokenPipeError:  # the reader of stdout left (`kvplan verify B | head -1`): nothing to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return EXIT_BAD_INPUT
    except (ValueError, OSError) as exc:
        print_error(exc)
        return EXIT_BAD_INPUT
    except OverflowError as exc:  # a number in the input beyond what a 64-bit ledger or a float holds
        print_error(f"a number in the input is too large to hold ({exc})")
        return EXIT_BAD_INPUT
    except orjson.JSONEncodeError as exc:  # a JSON writer's last line of defence (issue 25)
        print_error(unwritable_json(exc))
        return EXIT_BAD_INPUT
    finally:
        print_warnings(notes)


__all__ = ["COMMANDS", "_print_json", "build_parser", "main"]
