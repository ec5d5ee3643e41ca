"""Ledger rows (dicts) into the ledger DataFrame: the glossary's columns, order and nullable dtypes.

Both readers (vLLM logs, ledger CSVs) build their frame here, so a ledger reads back alike from
either.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

import pandas as pd
from pandas.api.extensions import ExtensionArray

from kvplan.columns import BOOL_COLUMNS, FLOAT_COLUMNS, INT_COLUMNS, LEDGER_COLUMNS


def missing(value: object) -> bool:
    """True for a value the ledger stores as ``NA``: None, ``pd.NA`` or NaN.

    >>> missing(None), missing(pd.NA), missing(float("nan")), missing(0)
    (True, True, True, False)
    """
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


#: A row with every ledger column unknown: a reader that starts its rows from it has them gathered faster.
EMPTY_ROW: dict = dict.fromkeys(LEDGER_COLUMNS)
_EVERY_COLUMN = itemgetter(*LEDGER_COLUMNS)

#: Each ledger column's dtype.
COLUMN_DTYPES = {
    column: "Int64"
    if column in INT_COLUMNS
    else "Float64"
    if column in FLOAT_COLUMNS
    else "boolean"
    if column in BOOL_COLUMNS
    else "string"
    for column in LEDGER_COLUMNS
}
#: A ledger dtype → the Python type of its cells (as pandas writes them).
CELL_TYPES = {"Int64": int, "Float64": float, "boolean": bool, "string": str}
#: The types of a missing cell.
MISSING_TYPES = frozenset({type(None), type(pd.NA)})


def ledger_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows → ledger with the glossary's columns, order and nullable dtypes (a column a row lacks is
    ``NA``).

    >>> frame = ledger_frame([{"rank": 0, "room_bytes": 12, "outcome": "ok"}])
    >>> frame.loc[0, "room_bytes"], str(frame["room_bytes"].dtype), frame["model"].isna().all()
    (np.int64(12), 'Int64', np.True_)
    """
    return pd.DataFrame(ledger_columns(rows), columns=LEDGER_COLUMNS, copy=False)


def ledger_columns(rows: list[dict]) -> dict[str, ExtensionArray]:
    """Rows → ``column → array`` of :func:`ledger_frame` (the frame's parts, to be joined as they are).

    >>> columns = ledger_columns([{"rank": 1, "outcome": "ok"}, {"rank": 2}])
    >>> columns["rank"].tolist(), columns["outcome"].tolist()
    ([1, 2], ['ok', <NA>])
    """
    table = ledger_table(rows)
    cells = zip(*table) if table else [()] * len(LEDGER_COLUMNS)
    return {
        column: column_array(values, COLUMN_DTYPES[column]) for column, values in zip(LEDGER_COLUMNS, cells)
    }


def ledger_table(rows: list[dict]) -> list[tuple]:
    """Each row's cells in :data:`~kvplan.columns.LEDGER_COLUMNS` order (a column a row lacks: None).

    >>> ledger_table([{"rank": 3}])[0][:3]
    (None, None, 3)
    """
    try:  # rows holding every column (the log reader's: see EMPTY_ROW) are gathered in one C pass
        return list(map(_EVERY_COLUMN, rows))
    except KeyError:
        return [tuple(row.get(column) for column in LEDGER_COLUMNS) for row in rows]


def column_array(cells: Sequence, dtype: str) -> ExtensionArray:
    """One column's cells → its array of ``dtype`` (``Int64``, ``Float64``, ``boolean`` or ``string``),
    None, ``pd.NA`` and NaN as ``NA``, as ``pd.array`` makes it (a string column's cells as text).

    >>> column_array((5, None, pd.NA), "Int64")
    <IntegerArray>
    [5, <NA>, <NA>]
    Length: 3, dtype: Int64
    >>> column_array((0.9, float("nan")), "Float64").tolist(), column_array((7, None), "string").tolist()
    ([0.9, <NA>], ['7', <NA>])
    """
    if dtype == "string":
        cells = [None if missing(value) else str(value) for value in cells]
    return pd.array(cells, dtype=dtype)
