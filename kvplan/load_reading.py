"""A run's load rows with their warnings and per-file facts: :class:`LoadReading`, and combining readings.

What the load readers return: the rows of every file of one load-test run (kept in packed columns,
:class:`~kvplan.load_table.LoadRows`, so memory follows the rows, never the input's text), its warnings
and per-file facts (:class:`~kvplan.load_rows.LoadSource`); :meth:`LoadReading.json_chunks` writes the
reading as the text of ``json.dumps``, a batch of rows at a time.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from kvplan.load_rows import ROW_KEYS, LoadRow, LoadSource
from kvplan.load_table import JSON_BATCH, ROW_FIELDS, UNKNOWN_NUMBER, LoadRows

__all__ = ["JSON_BATCH", "ROW_FIELDS", "UNKNOWN_NUMBER", "LoadReading", "LoadRows", "combine_readings"]


@dataclass(frozen=True)
class LoadReading:
    """Rows, warnings and per-file facts read from the files of one load-test run."""

    rows: Sequence[LoadRow]  # a tuple, or a compact LoadRows table from a reader
    warnings: tuple[str, ...] = ()
    sources: tuple[LoadSource, ...] = ()

    def row_dicts(self) -> Iterator[dict]:
        """Each row's :meth:`LoadRow.to_dict`, in order (straight from the columns of a :class:`LoadRows`)."""
        if isinstance(self.rows, LoadRows):
            return self.rows.dicts()
        return (row.to_dict() for row in self.rows)

    def to_dict(self) -> dict:
        """``{"rows": [...], "warnings": [...]}``, the JSON of ``kvplan load --json``."""
        return {"rows": list(self.row_dicts()), "warnings": list(self.warnings)}

    def json_chunks(self) -> Iterator[str]:
        """:meth:`to_dict` as strict JSON text in pieces of :data:`JSON_BATCH` rows: the text of
        ``json.dumps(reading.to_dict())`` and a newline, without holding every row's dict (the rows of a
        :class:`LoadRows` a batch at a time, see :meth:`LoadRows.texts`; others by the C encoder).

        >>> reading = LoadReading((LoadRow("a.log", 3, None, 0),), ("w",))
        >>> "".join(reading.json_chunks()) == json.dumps(reading.to_dict()) + chr(10)
        True
        """
        encode = json.JSONEncoder(allow_nan=False, check_circular=False).encode  # C, no indent
        if isinstance(self.rows, LoadRows):
            texts = self.rows.texts("json")
        else:
            texts = (encode(batch)[1:-1] for batch in self._dict_batches())
        yield '{"rows": ['
        for number, text in enumerate(texts):
            yield text if number == 0 else ", " + text
        yield f'], "warnings": {encode(list(self.warnings))}}}\n'

    def csv_chunks(self) -> Iterator[str]:
        """The rows as CSV text in pieces of :data:`JSON_BATCH` rows, a header line of :data:`ROW_KEYS`
        first: the text that ``csv.writer`` (``lineterminator="\\n"``) gives for the header and each row's
        values (``None`` = unknown, an empty field).

        >>> print("".join(LoadReading((LoadRow("a.log", 3, None, 0, kv_cache_usage_pct=41.5),)).csv_chunks()))
        source,line,time,engine,kv_cache_usage_pct,running,waiting,swapped,prompt_tokens_per_s,generation_tokens_per_s,prefix_cache_hit_pct,preemptions,preemptions_total,event
        a.log,3,,0,41.5,,,,,,,,,
        <BLANKLINE>
        """
        yield ",".join(ROW_KEYS) + "\n"
        if isinstance(self.rows, LoadRows):
            yield from self.rows.texts("csv")
            return
        for batch in self._dict_batches():
            text = io.StringIO()
            csv.writer(text, lineterminator="\n").writerows(row.values() for row in batch)
            yield text.getvalue()

    def _dict_batches(self) -> Iterator[list[dict]]:
        """:meth:`row_dicts` in lists of up to :data:`JSON_BATCH`."""
        dicts = self.row_dicts()
        return iter(lambda: list(itertools.islice(dicts, JSON_BATCH)), [])

    @property
    def kv_cache_tokens(self) -> int | None:
        """The run's KV capacity in tokens when its files state one value; ``None`` otherwise."""
        values = {s.kv_cache_tokens for s in self.sources if s.kv_cache_tokens is not None}
        return values.pop() if len(values) == 1 else None


def combine_readings(readings: Iterable[LoadReading], order: Sequence[str] = ()) -> LoadReading:
    """One reading from several, rows ordered by file (``order`` = paths as given), then by line.

    >>> a = LoadReading((LoadRow("b.log", 2, None, None),), ("w",))
    >>> b = LoadReading((LoadRow("a.log", 9, None, None),))
    >>> [row.source for row in combine_readings([a, b], order=["a.log", "b.log"]).rows]
    ['a.log', 'b.log']
    """
    readings = list(readings)
    rank = {source: position for position, source in enumerate(order)}
    runs: list[tuple[str, Sequence[LoadRow]]] = []
    for reading in readings:
        if isinstance(reading.rows, LoadRows):
            runs += reading.rows.source_runs()
        else:
            runs += [(row.source, (row,)) for row in reading.rows]
    runs.sort(key=lambda run: rank.get(run[0], len(rank)))  # stable: file order, then line order
    if all(not isinstance(reading.rows, LoadRows) for reading in readings):
        rows: Sequence[LoadRow] = tuple(row for _, part in runs for row in part)
    elif len(runs) == 1:
        rows = runs[0][1]
    else:
        rows = LoadRows.concat(part for _, part in runs)
    return LoadReading(
        rows=rows,
        warnings=tuple(w for reading in readings for w in reading.warnings),
        sources=tuple(s for reading in readings for s in reading.sources),
    )
