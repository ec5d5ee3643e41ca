"""What every command prints: tables, strict JSON and ``warning:`` lines on stderr.

A command prints one JSON object with ``--json`` (:func:`print_json`: a ``NaN`` or ``±Inf`` prints as
null) and a readable table without it (:func:`format_table`); the warnings of the readers and the
ledger become the command's own ``warning: …`` lines (:func:`reader_warnings_into`, :func:`print_warnings`),
an error its one ``error: …`` line (:func:`print_error`). Text from files in a table cell, a warning or
an error is shown with its control characters escaped (:func:`kvplan.escape.terminal_text`): no escape
sequence reaches the terminal and one record is one line.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from warnings import catch_warnings, showwarning, simplefilter

from kvplan.cli.errors import EXIT_OK
from kvplan.escape import terminal_text
from kvplan.json_text import indented_chunks

#: Warnings of the readers and the ledger that a command reports as its own ``warning:`` lines / JSON,
#: named (module and class) so that catching them imports neither the readers nor pandas.
REPORTED_WARNINGS = ("kvplan.ledger.LedgerWarning", "kvplan.io.nvidia_smi.NvidiaSmiWarning")


class _NamedWarnings(type):
    """A category that matches the :data:`REPORTED_WARNINGS` and their subclasses, by name."""

    def __subclasscheck__(cls, other: type) -> bool:
        return any(
            f"{base.__module__}.{base.__qualname__}" in REPORTED_WARNINGS
            for base in getattr(other, "__mro__", ())
        )


class ReportedWarning(Warning, metaclass=_NamedWarnings):
    """The category of every :data:`REPORTED_WARNINGS` class, for ``warnings`` filters and ``issubclass``.

    >>> from kvplan.ledger import LedgerWarning
    >>> issubclass(LedgerWarning, ReportedWarning), issubclass(UserWarning, ReportedWarning)
    (True, False)
    """


@contextmanager
def reader_warnings_into(notes: list[str]) -> Iterator[None]:
    """Collect the :data:`REPORTED_WARNINGS` raised inside into ``notes`` (each once), not Python's print.

    >>> import warnings
    >>> from kvplan.ledger import LedgerWarning
    >>> notes = []
    >>> with reader_warnings_into(notes):
    ...     warnings.warn(LedgerWarning("rank 1 shows no room"))
    >>> notes
    ['rank 1 shows no room']
    """
    caught: list = []
    try:
        with catch_warnings(record=True) as caught:
            simplefilter("always", ReportedWarning)
            yield
    finally:
        for warning in caught:
            if not issubclass(warning.category, ReportedWarning):
                showwarning(warning.message, warning.category, warning.filename, warning.lineno)
            elif str(warning.message) not in notes:
                notes.append(str(warning.message))


def print_warnings(warnings: Sequence[str]) -> None:
    """Print each warning kind of each file once (:func:`kvplan.notes.aggregate_notes`) as one
    ``warning: …`` line each."""
    from kvplan.notes import aggregate_notes

    for warning in aggregate_notes(warnings):
        print(f"warning: {terminal_text(warning)}", file=sys.stderr)


def print_error(message: object) -> None:
    r"""Print ``message`` as one ``error: …`` line on stderr, its control characters escaped.

    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     print_error("bad\nfile.log: no boot")
    >>> err.getvalue()
    'error: bad\\nfile.log: no boot\n'
    """
    print(f"error: {terminal_text(message)}", file=sys.stderr)


def format_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Plain-text table with right-aligned columns, one line per row; control characters in a cell are
    shown escaped (:func:`kvplan.escape.terminal_text`).

    >>> print(format_table([{"rank": 0, "safe": "12 GiB"}], ["rank", "safe"]))
    rank    safe
       0  12 GiB
    """
    cells = [[terminal_text(row.get(column, "")) for column in columns] for row in rows]
    widths = [max([len(column), *(len(row[i]) for row in cells)]) for i, column in enumerate(columns)]
    lines = ["  ".join(column.rjust(width) for column, width in zip(columns, widths))]
    lines += ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def strict_json(value: object) -> object:
    """``value`` with every non-finite float (NaN, ±Inf) replaced by None, through dicts and
    lists.

    >>> strict_json({"a": float("nan"), "b": [1.5, float("inf")]})
    {'a': None, 'b': [1.5, None]}
    """
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def print_json(data: dict) -> int:
    """Print ``data`` as strict JSON: a float ``NaN`` or ``±Inf`` (which JSON cannot hold) prints as null.
    The text is ``json.dumps(data, indent=2)``'s, written at C speed (:func:`kvplan.json_text.indented_chunks`).

    Returns the exit status ``EXIT_OK`` (0).

    >>> print_json({"a": [1, float("nan")]})
    {
      "a": [
        1,
        null
      ]
    }
    0
    """
    sys.stdout.writelines(indented_chunks(strict_json(data)))
    sys.stdout.write("\n")
    return EXIT_OK
