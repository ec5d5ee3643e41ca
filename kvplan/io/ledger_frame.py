"""Ledger rows (dicts) into the ledger DataFrame: the glossary's columns, order and nullable dtypes.

Both readers (vLLM logs, ledger CSVs) build their frame here, so a ledger reads back alike from
either.
"""

from __future__ import annotations

from operator import itemgetter

import pandas as pd

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


def ledger_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows → ledger with the glossary's columns, order and nullable dtypes (a column a row lacks is
    ``NA``).

    >>> frame = ledger_frame([{"rank": 0, "room_bytes": 12, "outcome": "ok"}])
    >>> frame.loc[0, "room_bytes"], str(frame["room_bytes"].dtype), frame["model"].isna().all()
    (np.int64(12), 'Int64', np.True_)
    """
    try:  # rows holding every column (the log reader's: see EMPTY_ROW) are gathered in one C pass
        table = list(map(_EVERY_COLUMN, rows))
    except KeyError:
        table = [tuple(row.get(column) for column in LEDGER_COLUMNS) for row in rows]
    data = {}
    for column, cells in zip(LEDGER_COLUMNS, zip(*table) if table else [()] * len(LEDGER_COLUMNS)):
        # missing() spelled out: one pass, no call per cell
        values = [
            None
            if value is None or value is pd.NA or (isinstance(value, float) and value != value)
            else value
            for value in cells
        ]
        if column in INT_COLUMNS:
            data[column] = pd.array(values, dtype="Int64")
        elif column in FLOAT_COLUMNS:
            data[column] = pd.array(values, dtype="Float64")
        elif column in BOOL_COLUMNS:
            data[column] = pd.array(values, dtype="boolean")
        else:
            data[column] = pd.array([None if v is None else str(v) for v in values], dtype="string")
    return pd.DataFrame(data, columns=LEDGER_COLUMNS)
