"""``--help`` pages whose examples copy and paste: prose is re-wrapped, each example stays one line.

:func:`add_command` registers a subcommand from its help page (a text written as it reads,
:func:`read_page`): its description wrapped to the terminal as usual, its example commands in the epilog
under :data:`EXAMPLES_HEADING`, one per line, never re-wrapped.

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


def add_command(sub: argparse._SubParsersAction, name: str, page: str) -> argparse.ArgumentParser:
    """Register subcommand ``name`` from its help ``page`` (:func:`read_page`): the summary in
    ``kvplan --help``, the description and the example commands in ``kvplan NAME --help``."""
    summary, description, commands = read_page(page)
    return sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples(commands),
        formatter_class=ExampleFormatter,
    )


def read_page(page: str) -> tuple[str, str, list[str]]:
    """``(summary, description, example commands)`` of a help page written as it reads: the summary
    paragraph, the description paragraphs, then :data:`EXAMPLES_HEADING` and one command per indented
    line. Prose is joined into one line (argparse wraps it to the terminal); commands stay whole.

    >>> read_page("add two\\nsizes\\n\\nThe sum of A\\nand B.\\n\\nFor example:\\n  kvplan add 1 2\\n")
    ('add two sizes', 'The sum of A and B.', ['kvplan add 1 2'])
    """
    prose, _, listed = page.partition(EXAMPLES_HEADING)
    summary, _, description = prose.strip().partition("\n\n")
    return (
        " ".join(summary.split()),
        " ".join(description.split()),
        [line.strip() for line in listed.splitlines() if line.strip()],
    )
