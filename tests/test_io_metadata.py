"""Provenance rows (:class:`kvplan.io.metadata.ProvenanceRows`): every row kept comes back as given."""

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.io.metadata import ProvenanceRows

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
    for batch in batches:
        rows.extend(batch)
    given_rows = [row for batch in batches for row in batch]
    assert len(rows) == len(given_rows)
    assert all(repr(got) == repr(row) for got, row in zip(rows, given_rows))
