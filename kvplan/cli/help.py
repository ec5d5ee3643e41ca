"""``--help`` pages whose examples copy and paste: prose is re-wrapped, each example stays one line.

:func:`add_command` registers a subcommand with its description (wrapped to the terminal as usual) and
its example commands in the epilog under :data:`EXAMPLES_HEADING`, one per line, never re-wrapped.

>>> parser = argparse.ArgumentParser(prog="kvplan", formatter_class=ExampleFormatter,
...                                  epilog=examples(["kvplan capacity --max-model-len 8192"]))
>>> print(parser.format_help().splitlines()[-1])
  kvplan capacity --max-model-len 8192
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

#: The line above a help page's example commands.
EXAMPLES_HEADING = "For example:"


def examples(commands: Sequence[str]) -> str:
    """The epilog of a help page: :data:`EXAMPLES_HEADING`, then each command indented on its own line."""
    return "\n".join([EXAMPLES_HEADING, *(f"  {command}" for command in commands)])


class ExampleFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that the examples epilog (:func:`examples`) is printed as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EXAMPLES_HEADING):
            return "\n".join(indent + line for line in text.splitlines())
        return super()._fill_text(text, width, indent)


def add_command(
    sub: argparse._SubParsersAction, name: str, summary: str, description: str, commands: Sequence[str]
) -> argparse.ArgumentParser:
    """Register subcommand ``name``: ``summary`` in ``kvplan --help``, ``description`` and the example
    ``commands`` in ``kvplan NAME --help``."""
    return sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples(commands),
        formatter_class=ExampleFormatter,
    )
