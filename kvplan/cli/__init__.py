"""The ``kvplan`` command: parse arguments, call the library, format the answer (a table, or one JSON
object with ``--json``; bad input: one ``error: …`` line, exit 2). A command's module is imported, and its
``add_<command>(parser)`` called, only when it runs, so that ``kvplan X`` imports what X needs."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import NoReturn, cast

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

#: Every subcommand in ``--help`` order: its module of :mod:`kvplan.cli` and its one-line summary.
COMMANDS = {
    "budget": ("budget", "uniform --kv-cache-memory-bytes from vLLM logs (or per-rank room) and a reserve"),
    "ledger": ("ledger", "read vLLM startup logs into the per-rank ledger (one row per boot × rank)"),
    "capacity": ("capacity", "blocks, tokens and full-length concurrency of a per-GPU KV budget"),
    "drift": ("capacity", "cut a reference budget by the free memory a later boot lost"),
    "load": ("load", "KV cache usage, requests, preemptions and OOMs under load, from logs and /metrics"),
    "approve": ("approve", "write an evidence bundle: the approved budget, its ledger, charts and hashes"),
    "verify": ("approve", "re-check an evidence bundle: hashes, and the decision recomputed from its inputs"),
    "gate": ("gate", "check a canary boot against an approved budget (exit 0 pass, 1 fail, 2 cannot judge)"),
    "export": ("approve", "write an approved launch as a deployment reads it, from a verified bundle"),
    "fleet": ("fleet", "budgets per host class from many hosts' logs; rollout waves; canary gate"),
}


class _Commands(argparse._SubParsersAction):
    """The subcommands of :data:`COMMANDS`, each command's arguments added when it is chosen."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.added: set[str] = set()

    def add_arguments(self, name: str) -> None:
        if name not in self.added:
            self.added.add(name)
            module = import_module(f"kvplan.cli.{COMMANDS[name][0]}")
            getattr(module, f"add_{name}")(self.choices[name])

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        self.add_arguments(values[0])  # argparse checked it is one of the choices
        super().__call__(parser, namespace, values, option_string)


class _Version(argparse.Action):
    """``--version``: print ``kvplan VERSION`` and exit 0."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> NoReturn:
        from kvplan import __version__

        print(f"kvplan {__version__}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``error: kvplan budget: …`` and exit 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(every_command: bool = True) -> argparse.ArgumentParser:
    """The argument parser; without ``every_command``, a command's arguments are added when it is parsed."""
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
    version = "show program's version number and exit"
    parser.add_argument("--version", action=_Version, nargs=0, default=argparse.SUPPRESS, help=version)
    sub = cast(
        _Commands, parser.add_subparsers(dest="command", required=True, metavar="COMMAND", action=_Commands)
    )
    for name, (_module, summary) in COMMANDS.items():
        sub.add_parser(name, help=summary)
        if every_command:
            sub.add_arguments(name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``kvplan`` command with the cyclic collector paused (the process is its own, unlike a notebook
    kernel); returns the exit status (0 ok, 1 failed check, 2 bad input). As the process's own command (no
    ``argv``) it leaves what is left to the exit untraced (``gc.freeze``: ~0.1 CPU s with pandas loaded)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's idle BLAS threads spin; kvplan does no BLAS
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run(build_parser(every_command=False).parse_args(argv))
    finally:
        if argv is None:
            gc.freeze()
        if collecting:
            gc.enable()


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command: its errors as one line and exit 2, then the warnings it left unsaid."""
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
    except TypeError as exc:  # orjson's JSONEncodeError: a JSON writer's last line of defence (issue 25)
        orjson = sys.modules.get("orjson")  # imported by the writers only: light commands start without it
        if orjson is None or not isinstance(exc, orjson.JSONEncodeError):
            raise
        print_error(unwritable_json(exc))
        return EXIT_BAD_INPUT
    finally:
        print_warnings(notes)


__all__ = ["COMMANDS", "_print_json", "build_parser", "main"]
