"""Ledger rows: their physical bounds (:func:`check_row`, issue 11), the ledger frame (:func:`ledger_frame`)
both readers build, and the ledger CSV text, byte for byte as pandas writes the frame."""

from __future__ import annotations

import csv
import io
from operator import itemgetter

import pandas as pd
from pandas.api.extensions import ExtensionArray

from kvplan.columns import BOOL_COLUMNS, FLOAT_COLUMNS, INT_COLUMNS, LEDGER_COLUMNS
from kvplan.escape import csv_cell
from kvplan.units import MAX_DEVICE_BYTES, format_size

#: The largest parallel degree accepted: 65,536 GPUs in one launch.
MAX_PARALLEL_SIZE = 1 << 16
#: Linux's PID_MAX_LIMIT: no process id is larger.
MAX_PID = 1 << 22
#: Columns that cannot be below zero in any release (cudaMemGetInfo, a weight size, total × util).
NEVER_NEGATIVE = (
    "total_bytes",
    "init_free_bytes",
    "profiled_free_bytes",
    "requested_bytes",
    "weights_bytes",
    "manual_kv_bytes",
    "external_weights_bytes",
)
#: Columns that cannot exceed the GPU's total memory.
AT_MOST_TOTAL = (
    "init_free_bytes",
    "profiled_free_bytes",
    "requested_bytes",
    "weights_bytes",
    "room_bytes",
    "suggested_full_bytes",
    "suggested_fit_bytes",
    "available_kv_bytes",
    "kv_in_use_bytes",
)


class ImpossibleValue(ValueError):
    """A value no vLLM release can print; the message names the file and line."""


def possible_parallel_size(value: object) -> bool:
    """Whether ``value`` can be a parallel size (a whole number from 1 to :data:`MAX_PARALLEL_SIZE`)."""
    return not isinstance(value, int) or 1 <= value <= MAX_PARALLEL_SIZE


def check_parallel_size(column: str, value: object, source: str, line: object) -> None:
    """Refuse a parallel size that is not a count of GPUs from 1 to :data:`MAX_PARALLEL_SIZE`."""
    if not possible_parallel_size(value):
        raise ImpossibleValue(
            f"{source}:{line}: {column}={value} is impossible: a parallel size is a count of GPUs from 1 to "
            f"{MAX_PARALLEL_SIZE}"
        )


def check_value(column: str, value: object, source: str, line: object) -> None:
    """Refuse a value no vLLM line can show (issue 25): a whole number beyond :data:`MAX_DEVICE_BYTES` either
    side of zero, a pid beyond :data:`MAX_PID`, a gpu_memory_utilization outside (0, 1]."""
    if type(value) is int:
        bound = MAX_PID if column == "pid" else MAX_DEVICE_BYTES
        if abs(value) > bound:
            shown = format_size(bound) if column.endswith("_bytes") else f"{bound:,}"
            why = "Linux's largest pid" if column == "pid" else "far above any GPU's memory"
            raise ImpossibleValue(
                f"{source}:{line}: {column}={value} is impossible: expected at most {shown} ({why})"
            )
    elif column == "gpu_memory_utilization" and isinstance(value, float) and not 0 < value <= 1:
        raise ImpossibleValue(
            f"{source}:{line}: {column}={value} is impossible: expected a finite number in (0, 1]"
        )


def check_row(values: dict, rank: int, origin: dict, source: str) -> None:
    """Refuse a rank's row whose memory values no GPU can show (``origin[(rank, column)]`` = (line, raw)).

    >>> try:
    ...     row = {"total_bytes": 80 << 30, "room_bytes": 900 << 30}
    ...     check_row(row, 1, {(1, "room_bytes"): (3, "")}, "a")
    ... except ImpossibleValue as refused:
    ...     print(refused)
    a:3: rank 1: room_bytes 900 GiB is impossible: above the GPU's total memory 80 GiB
    """

    def where(column: str) -> str:
        line = origin.get((rank, column), (None, None))[0]
        return f"{source}:{line}" if isinstance(line, int) else source

    # the few whole numbers below zero or beyond any GPU first (one pass, no call per value)
    doubtful = [
        column
        for column, value in values.items()
        if type(value) is int and not 0 <= value <= MAX_DEVICE_BYTES
    ]
    for column in doubtful:
        value = values[column]
        if not column.endswith("_bytes"):
            continue
        if abs(value) > MAX_DEVICE_BYTES:
            raise ImpossibleValue(
                f"{where(column)}: rank {rank}: {column} {format_size(value)} is impossible: beyond "
                f"{format_size(MAX_DEVICE_BYTES)}, far above any GPU's memory"
            )
        if value < 0 and column in NEVER_NEGATIVE:
            raise ImpossibleValue(
                f"{where(column)}: rank {rank}: {column} {format_size(value)} is impossible: vLLM cannot "
                "print it below zero"
            )
    total = values.get("total_bytes")
    if not isinstance(total, int) or total <= 0:
        return
    for column in AT_MOST_TOTAL:
        value = values.get(column)
        if isinstance(value, int) and value > total:
            raise ImpossibleValue(
                f"{where(column)}: rank {rank}: {column} {format_size(value)} is impossible: above the GPU's "
                f"total memory {format_size(total)}"
            )


def missing(value: object) -> bool:
    """True for a value the ledger stores as ``NA``: None, ``pd.NA`` or NaN."""
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


#: A row with every ledger column unknown (rows started from it are gathered in one C pass).
EMPTY_ROW: dict = dict.fromkeys(LEDGER_COLUMNS)
_EVERY_COLUMN = itemgetter(*LEDGER_COLUMNS)

#: Each ledger column's dtype.
COLUMN_DTYPES = dict.fromkeys(LEDGER_COLUMNS, "string")
COLUMN_DTYPES |= {**dict.fromkeys(INT_COLUMNS, "Int64"), **dict.fromkeys(FLOAT_COLUMNS, "Float64")}
COLUMN_DTYPES |= dict.fromkeys(BOOL_COLUMNS, "boolean")
#: Each column's dtype object (a dtype's name is looked up in pandas' registry on every use).
_DTYPES = {column: pd.api.types.pandas_dtype(dtype) for column, dtype in COLUMN_DTYPES.items()}


def ledger_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows → ledger with the glossary's columns, order and nullable dtypes (a column a row lacks: ``NA``)."""
    return pd.DataFrame(ledger_columns(rows), columns=LEDGER_COLUMNS, copy=False)


def ledger_columns(rows: list[dict]) -> dict[str, ExtensionArray]:
    """Rows → ``column → array`` of :func:`ledger_frame`."""
    table = ledger_table(rows)
    columns = {}
    for column, cells in zip(LEDGER_COLUMNS, zip(*table) if table else [()] * len(LEDGER_COLUMNS)):
        texts = COLUMN_DTYPES[column] == "string"
        values = [None if missing(value) else str(value) for value in cells] if texts else cells
        columns[column] = pd.array(values, dtype=_DTYPES[column])
    return columns


def ledger_table(rows: list[dict]) -> list[tuple]:
    """Each row's cells in :data:`~kvplan.columns.LEDGER_COLUMNS` order (a column a row lacks: None)."""
    try:  # rows holding every column (the log reader's: see EMPTY_ROW) are gathered in one C pass
        return list(map(_EVERY_COLUMN, rows))
    except KeyError:
        return [tuple(row.get(column) for column in LEDGER_COLUMNS) for row in rows]


_NA = type(pd.NA)
_CELL_TYPES = {"Int64": int, "Float64": float, "boolean": bool, "string": str}  # as pandas writes them
#: Each ledger column's native cell types (what :mod:`csv` writes as pandas does), in column order.
_NATIVE = tuple({type(None), _NA, _CELL_TYPES[COLUMN_DTYPES[column]]} for column in LEDGER_COLUMNS)


def ledger_csv_header() -> str:
    return ",".join(LEDGER_COLUMNS) + "\n"


def ledger_csv_text(rows: list[dict], header: bool = True) -> str:
    """``rows`` as the text ``ledger_frame_csv(ledger_frame(rows), header)`` gives."""
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
    """The cells of ``table`` by column (``NA`` as None) when :mod:`csv` writes them as pandas does: native
    types, no NaN, whole numbers within ``Int64``; else None."""
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
    """A ledger frame as CSV text, a text cell a spreadsheet would run as a formula led by ``'``.

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
