"""Ledger rows (dicts) straight to CSV text, byte for byte as pandas writes their ledger frame.

``kvplan ledger --csv`` needs neither a DataFrame nor provenance: the reader hands it each batch of
rows as it resolves them (:func:`kvplan.io.vllm.read.stream_vllm_logs`) and this module writes them.
A batch whose cells all have their column's native type (``int`` for the ``Int64`` columns, ``float``
for ``Float64``, ``bool`` for ``boolean``, ``str`` for the rest; missing as None or ``pd.NA``) is
written by :mod:`csv` directly: for those types Python's own text of a value (``repr`` of a float)
is the text pandas writes. Any other batch (a float in a count column, a NaN, a number in a text
column) is written by pandas itself from :func:`~kvplan.io.ledger_frame.ledger_frame`, so the
text is the same whatever the rows hold. Either way a text cell that a spreadsheet would run as a
formula (``=HYPERLINK(…)`` from a log) is written with a leading ``'`` (:func:`kvplan.escape.csv_cell`).

>>> rows = [{"rank": 0, "model": "m, 8B", "gpu_memory_utilization": 0.9, "enforce_eager": True}]
>>> text = ledger_csv_text(rows)
>>> text.splitlines()[0].split(",")[:3], text.count("\\n")
(['source', 'boot', 'rank'], 2)
>>> text == ledger_frame_csv(ledger_frame(rows))
True
"""

from __future__ import annotations

import csv
import io

import pandas as pd

from kvplan.columns import LEDGER_COLUMNS
from kvplan.escape import csv_cell
from kvplan.io.ledger_frame import CELL_TYPES, COLUMN_DTYPES, MISSING_TYPES, ledger_frame, ledger_table

_NA = type(pd.NA)
#: Each ledger column's native cell types (what :mod:`csv` writes as pandas does), in column order.
_NATIVE = tuple(MISSING_TYPES | {CELL_TYPES[COLUMN_DTYPES[column]]} for column in LEDGER_COLUMNS)


def ledger_csv_header() -> str:
    """The ledger CSV's header line.

    >>> ledger_csv_header().startswith("source,boot,rank,")
    True
    """
    return ",".join(LEDGER_COLUMNS) + "\n"


def ledger_csv_text(rows: list[dict], header: bool = True) -> str:
    """``rows`` (dicts keyed by ledger column; a column a row lacks is ``NA``) as ledger CSV lines, the
    text ``ledger_frame_csv(ledger_frame(rows))`` gives (without its header line if not ``header``)."""
    columns = _native_columns(ledger_table(rows))
    if columns is None:
        return ledger_frame_csv(ledger_frame(rows), header)
    out = io.StringIO()
    if header:
        out.write(ledger_csv_header())
    # csv writes None empty, as pandas writes NA
    csv.writer(out, lineterminator="\n").writerows(zip(*columns))
    return out.getvalue()


def _native_columns(table: list[tuple]) -> list | None:
    """The cells of ``table`` (rows of cells in ledger column order) by column, ``NA`` as None, if every
    cell has its column's native type, no float is NaN (pandas writes NaN as missing, :mod:`csv` as
    ``nan``) and every whole number fits ``Int64`` (pandas refuses one that does not); else None."""
    columns: list = list(zip(*table))
    for index, (cells, native) in enumerate(zip(columns, _NATIVE)):
        kinds = set(map(type, cells))
        if not kinds <= native:
            return None
        if float in kinds and any(cell != cell for cell in cells if type(cell) is float):
            return None
        if _NA in kinds:
            cells = columns[index] = [None if cell is pd.NA else cell for cell in cells]
        if str in kinds:
            columns[index] = [csv_cell(cell) for cell in cells]
        if int in kinds:
            numbers = set(cells)  # the distinct numbers: few, however many rows
            numbers.discard(None)
            if min(numbers) < _INT64_MIN or max(numbers) > _INT64_MAX:
                return None
    return columns


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def ledger_frame_csv(ledger: pd.DataFrame, header: bool = True) -> str:
    """A ledger frame as CSV text (``to_csv(index=False)``), each text cell through
    :func:`kvplan.escape.csv_cell`: one that begins with ``= + - @``, a tab or a CR starts with ``'``.

    >>> frame = pd.DataFrame({"model": pd.array(["=1+1", "m"], dtype="string"), "rank": [-1, 0]})
    >>> print(ledger_frame_csv(frame), end="")
    model,rank
    '=1+1,-1
    m,0
    """
    text_columns = [c for c in ledger.columns if ledger[c].dtype == "string" or ledger[c].dtype == object]
    if text_columns:
        ledger = ledger.assign(**{c: ledger[c].map(csv_cell, na_action="ignore") for c in text_columns})
    return ledger.to_csv(index=False, header=header)
