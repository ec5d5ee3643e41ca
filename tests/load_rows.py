"""Load rows for tests: readings made from rows given as the old positional form, and rows read back.

``load_row(source, line, time, engine, **values)`` gives a row's mapping, ``load_reading(rows, warnings,
sources)`` the reading of such rows (through the readers' own :class:`kvplan.io.load.RowBuilder`), and
``rows_of(reading)`` each row of a frame with its values as attributes (``None`` = unknown, ``time`` a
``datetime``) and ``to_dict()`` (the JSON row of ``kvplan load --json``).
"""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from kvplan.columns import LOAD_COLUMNS
from kvplan.io.load import LoadReading, frame_of, reading_of


def load_row(source, line, time, engine, **values) -> dict:
    return {"source": source, "line": line, "time": time, "engine": engine, **values}


def load_reading(rows, warnings=(), sources=()) -> LoadReading:
    return reading_of([frame_of(rows)], warnings, sources)


class Row(SimpleNamespace):
    """A row's values as attributes; ``to_dict()`` its JSON row."""

    def to_dict(self) -> dict:
        return self._record


def rows_of(reading: LoadReading) -> list[Row]:
    frame = reading.frame
    records = reading.records()
    out = []
    for position, record in enumerate(records):
        values = {
            name: (None if pd.isna(value) else value)
            for name, value in zip(LOAD_COLUMNS, frame.iloc[position].tolist())
        }
        if values["time"] is not None:
            values["time"] = values["time"].to_pydatetime()
        out.append(Row(**values, _record=record))
    return out
