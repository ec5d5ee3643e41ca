"""The fast paths at the ledger's end of a read give exactly what the general ones give.

- :func:`kvplan.io.ledger_frame.column_array` puts cells of a column's own Python type straight into
  its array: the array ``pd.array`` makes of the cells (None, ``pd.NA`` and NaN as ``NA``), and what
  ``pd.array`` refuses it refuses.
- :meth:`kvplan.io.metadata.ProvenanceRows.extend` packs each field at once: the rows come back as
  given, names coded in the order they first come.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.io.ledger_frame import column_array, missing
from kvplan.io.metadata import ProvenanceRows, string_code

ROOT = Path(__file__).resolve().parent.parent
MISSING = st.sampled_from([None, pd.NA, float("nan")])
CELLS = {
    "Int64": st.one_of(MISSING, st.integers(-(2**63), 2**63 - 1), st.just(np.int64(7)), st.just(2.0)),
    "Float64": st.one_of(MISSING, st.floats(allow_nan=False), st.just(-0.0), st.just(3)),
    "boolean": st.one_of(MISSING, st.booleans(), st.just(np.bool_(True))),
    "string": st.one_of(MISSING, st.text(max_size=4), st.just(12), st.just(0.5)),
}


def pd_array(cells, dtype):
    """The array as ``pd.array`` makes it of the cells, missing ones as None (the general path)."""
    values = [None if missing(value) else value for value in cells]
    if dtype == "string":
        values = [None if value is None else str(value) for value in values]
    return pd.array(values, dtype=dtype)


@pytest.mark.parametrize("dtype", list(CELLS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_column_array_is_the_array_pd_array_makes(dtype, data):
    cells = tuple(data.draw(st.lists(CELLS[dtype], max_size=8)))
    fast = column_array(cells, dtype)
    assert str(fast.dtype) == str(pd_array(cells, dtype).dtype)
    assert fast.tolist() == pd_array(cells, dtype).tolist()


def outcome(make, cells, dtype):
    try:
        return make(cells, dtype).tolist()
    except (TypeError, ValueError) as exc:
        return type(exc)


@pytest.mark.parametrize(
    "cells, dtype",
    [
        ((1, "2"), "Int64"),
        ((1.5, None), "Int64"),
        (("x", 1), "Int64"),
        ((True, "no"), "boolean"),
        (("1.5",), "Float64"),
    ],
)
def test_a_column_array_takes_or_refuses_what_pd_array_does(cells, dtype):
    assert outcome(column_array, cells, dtype) == outcome(pd_array, cells, dtype)


ROW = st.tuples(
    st.sampled_from(["a.log", "b.log"]),
    st.one_of(st.just(pd.NA), st.integers(1, 10**9)),
    st.integers(0, 10**6),
    st.one_of(st.just(pd.NA), st.integers(0, 64)),
    st.sampled_from(["room_bytes", "outcome", "block_size", "model"]),
    st.one_of(st.integers(), st.text(max_size=3), st.just(pd.NA)),
    st.one_of(st.integers(0, 2**40), st.text(max_size=5)),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(ROW, max_size=6), max_size=5))
def test_provenance_rows_come_back_as_given(batches):
    rows = ProvenanceRows()
    names, codes = [], {}
    for batch in batches:
        rows.extend(batch)
        for row in batch:  # the general path: each row's source, then its column
            string_code(row[0], names, codes)
        for row in batch:
            string_code(row[4], names, codes)
    given_rows = [row for batch in batches for row in batch]
    assert len(rows) == len(given_rows)
    assert all(repr(got) == repr(row) for got, row in zip(rows, given_rows))
    assert rows._names == names
