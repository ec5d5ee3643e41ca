"""A run's load rows kept in packed columns: :class:`LoadRows`, one typed array per field.

A load reader appends its rows to a :class:`LoadRows` (about 110 bytes a row, so memory follows the rows,
never the input's text); indexing gives :class:`~kvplan.load_rows.LoadRow` s, and :meth:`LoadRows.columns`
and :meth:`LoadRows.texts` give the rows a batch at a time, straight from the columns, for CSV and
JSON writers. Units as in :mod:`kvplan.load_rows`; times are kept in µs since year 1.
"""

from __future__ import annotations

import itertools
import math
import struct
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta

from kvplan.codes import string_code
from kvplan.load_rows import EVENTS, KINDS, ROW_KEYS, LoadFormatError, LoadRow
from kvplan.load_texts import (
    EPOCH,
    FORMS,
    MICROSECOND,
    UNKNOWN_NUMBER,
    NumberTexts,
    known_numbers,
    shared_value,
    time_texts,
)

ROW_FIELDS = (*ROW_KEYS[:-1], "kind", "year_known", "restarts")  # a LoadRows row, before "event"
_FLOAT_FIELDS = {
    "kv_cache_usage_pct",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "prefix_cache_hit_pct",
}
#: each column's array type: the source's index, 64-bit whole numbers and floats, one byte for codes
_TYPES = (
    *(
        "H"
        if name == "source"
        else "d"
        if name in _FLOAT_FIELDS
        else "B"
        if name in ("kind", "year_known")
        else "q"
        for name in ROW_FIELDS
    ),
    "B",
)
_LAYOUT = struct.Struct("<" + "".join(_TYPES))  # one row's fields, to check that each fits its column
_EVENT_CODES = (None, *EVENTS)
_JSON_POSITIONS = tuple(ROW_FIELDS.index(key) if key != "event" else len(ROW_FIELDS) for key in ROW_KEYS)
_EMPTY = tuple(
    math.nan
    if name in _FLOAT_FIELDS
    else "log"
    if name == "kind"
    else True
    if name == "year_known"
    else UNKNOWN_NUMBER
    for name in ROW_FIELDS[3:]
)
_KIND = ROW_FIELDS.index("kind")
_YEAR_KNOWN = ROW_FIELDS.index("year_known")
_TIME = ROW_FIELDS.index("time")
_FLOAT_POSITIONS = tuple(position for position, name in enumerate(ROW_FIELDS) if name in _FLOAT_FIELDS)
#: the ROW_KEYS whose values are numbers that may repeat (counts, rates; a line number never does)
_REPEATING_NUMBERS = tuple(key not in ("source", "line", "time", "event") for key in ROW_KEYS)
JSON_BATCH = 4096  # rows per batch of :meth:`LoadRows.columns` (and per piece of the JSON text)


def _same(value):
    return value


class LoadRows(Sequence):
    """:class:`LoadRow` s kept in packed columns, one typed array per field (about 110 bytes a row).

    What the load readers return for a file of any size: a stats log of 800,000 lines keeps its rows in
    about 90 MB instead of 1 GB of objects. Rows are appended a batch at a time (:meth:`add`,
    :meth:`add_packed`); indexing and iteration give :class:`LoadRow` s, :meth:`dicts` the JSON rows and
    :meth:`texts` their JSON or CSV text straight from the columns. Unknown numbers are kept as sentinels (a float ``NaN`` or
    ``±Inf`` reads back as unknown, as :func:`~kvplan.load_rows.finite` does); ``raw`` is kept for event
    rows only (what a check quotes), a stats row's provenance is its source and line.

    >>> rows = LoadRows()
    >>> rows.append(LoadRow("s.log", 7, datetime(2026, 11, 29, 10, 0, 10), 0, kv_cache_usage_pct=41.5))
    0
    >>> rows.set(0, "running", 12)
    >>> rows[0].running, rows[0].kv_cache_usage_pct, rows[0].waiting, len(rows)
    (12, 41.5, None, 1)
    """

    def __init__(self) -> None:
        self._columns: list[array] = [array(code) for code in _TYPES]  # ROW_FIELDS, then the event's code
        self._pending: list[tuple] = []  # rows appended since the last flush into the columns
        self._raw: dict[int, str] = {}
        self._sources: list[str] = []
        self._source_index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._columns[0]) + len(self._pending)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same rows (a tuple of :class:`LoadRow` s included)."""
        if not isinstance(other, Sequence) or isinstance(other, str) or len(other) != len(self):
            return False
        return all(mine == theirs for mine, theirs in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # mutable while a reader fills it

    def _flush(self) -> None:
        """Move the pending rows into the columns."""
        if self._pending:
            for column, values in zip(self._columns, zip(*self._pending)):
                column.extend(values)
            self._pending.clear()

    def source_code(self, source: str) -> int:
        """The number that stands for ``source`` in packed rows (see :meth:`add_packed`)."""
        return string_code(source, self._sources, self._source_index)

    def add(
        self,
        source: str,
        line: int,
        time: datetime | None,
        values: Mapping[str, object],
        *,
        event: str | None = None,
        raw: str = "",
    ) -> int:
        """Append a row from its source, line, time and the other :data:`ROW_FIELDS` in ``values``;
        returns its index. A whole number beyond 64 bits is a :class:`LoadFormatError`."""
        packed = [values.get(name) for name in ROW_FIELDS[3:]]
        packed = [empty if value is None else value for value, empty in zip(packed, _EMPTY)]
        packed[_KIND - 3] = KINDS.index(packed[_KIND - 3])
        when = UNKNOWN_NUMBER if time is None else (time - EPOCH) // MICROSECOND
        fields = (self.source_code(source), line, when, *packed, _EVENT_CODES.index(event))
        try:
            _LAYOUT.pack(*fields)
        except struct.error as exc:
            raise LoadFormatError(f"{source}:{line}: a number too large to hold ({exc})") from None
        index = len(self)
        self.add_packed(*fields)
        if event is not None and raw:
            self._raw[index] = raw
        return index

    def add_packed(self, *fields) -> None:
        """Append a row given packed (a reader's fast path): the :meth:`source_code`, the line, the time in
        µs since year 1, the other :data:`ROW_FIELDS` (an unknown whole number is :data:`UNKNOWN_NUMBER`,
        an unknown float ``NaN``, ``kind`` its index in :data:`~kvplan.load_rows.KINDS`) and the event's
        code (0: none). Each must fit its column (whole numbers in 64 bits): :meth:`add` checks that.

        >>> rows = LoadRows()
        >>> nan = math.nan
        >>> rows.add_packed(rows.source_code("s.log"), 7, UNKNOWN_NUMBER, 0, 41.5, 3, 0, UNKNOWN_NUMBER,
        ...                 nan, nan, nan, 0, UNKNOWN_NUMBER, 0, True, 0, 0)
        >>> rows[0] == LoadRow("s.log", 7, None, 0, kv_cache_usage_pct=41.5, running=3, waiting=0, preemptions=0)
        True
        """
        self._pending.append(fields)
        if len(self._pending) >= JSON_BATCH:
            self._flush()

    def extend_columns(self, count: int, **columns) -> None:
        """Append ``count`` rows given a column at a time: each of :data:`ROW_FIELDS` and ``event`` names
        the rows' packed values (see :meth:`add_packed`: an iterable such as ``map(int, texts)``, or an
        ``array`` of the column's type) or the one value they all share. Each value must fit its column.

        >>> rows = LoadRows()
        >>> shared = {name: 0 for name in (*ROW_FIELDS, "event")} | {"source": rows.source_code("s.log")}
        >>> rows.extend_columns(2, **shared | {"line": (3, 4), "running": map(int, ["12", "9"])})
        >>> [(row.source, row.line, row.running) for row in rows]
        [('s.log', 3, 12), ('s.log', 4, 9)]
        """
        self._flush()
        for name, column in zip((*ROW_FIELDS, "event"), self._columns):
            values = columns[name]
            if isinstance(values, (int, float)):
                column.extend(array(column.typecode, [values]) * count)
            elif isinstance(values, array) and values.typecode == column.typecode:
                column.extend(values)  # already packed
            else:  # packed by struct: a third of what array's own conversion of each item costs
                values = values if isinstance(values, list) else list(values)
                column.frombytes(struct.pack(f"{len(values)}{column.typecode}", *values))

    def append(self, row: LoadRow) -> int:
        """Append a :class:`LoadRow`; returns its index."""
        values = {name: getattr(row, name) for name in ROW_FIELDS[3:]}
        return self.add(row.source, row.line, row.time, values, event=row.event, raw=row.raw)

    def set(self, index: int, name: str, value) -> None:
        """Change one field (a :data:`ROW_FIELDS` name, ``event`` or ``raw``) of row ``index``."""
        if name == "raw":
            self._raw[index] = value
            return
        row = self[index]
        fields = {key: getattr(row, key) for key in (*ROW_FIELDS, "event", "raw")}
        fields[name] = value
        replacement = LoadRows()
        replacement._sources, replacement._source_index = self._sources, self._source_index
        replacement.add(
            fields.pop("source"),
            fields.pop("line"),
            fields.pop("time"),
            fields,
            event=fields["event"],
            raw=fields["raw"],
        )
        replacement._flush()
        for column, new in zip(self._columns, replacement._columns):
            column[index] = new[0]
        if replacement._raw:
            self._raw[index] = replacement._raw[0]

    def shift_times(self, shift: timedelta) -> None:
        """Add ``shift`` to every known time (a log's local times turned into UTC)."""
        self._flush()
        micros, times = shift // MICROSECOND, self._columns[_TIME]
        self._columns[_TIME] = array(
            "q", [value if value == UNKNOWN_NUMBER else value + micros for value in times]
        )

    def _values(self, index: int) -> list:
        """Row ``index`` in :data:`ROW_FIELDS` order plus ``event`` (``None`` = unknown; the time in µs)."""
        values: list = [
            None if value == UNKNOWN_NUMBER else value
            for value in (column[index] for column in self._columns)
        ]
        for position in _FLOAT_POSITIONS:
            value = values[position]
            if value is not None and value - value != 0:  # NaN or ±Inf
                values[position] = None
        values[0] = self._sources[values[0]]
        values[_KIND], values[_YEAR_KNOWN] = KINDS[values[_KIND]], bool(values[_YEAR_KNOWN])
        values[-1] = _EVENT_CODES[values[-1]]
        return values

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("load row index out of range")
        self._flush()
        values = self._values(index)
        if values[_TIME] is not None:
            values[_TIME] = EPOCH + values[_TIME] * MICROSECOND
        return LoadRow(**dict(zip(ROW_FIELDS, values)), event=values[-1], raw=self._raw.get(index, ""))

    def __iter__(self) -> Iterator[LoadRow]:
        return (self[index] for index in range(len(self)))

    def dicts(self) -> Iterator[dict]:
        """Each row's :meth:`LoadRow.to_dict`, from the columns (no :class:`LoadRow` is built)."""
        for columns in self.columns():
            yield from map(dict, map(zip, itertools.repeat(ROW_KEYS), zip(*columns)))

    def texts(self, form: str = "json") -> Iterator[str]:
        """The rows as text, :data:`JSON_BATCH` rows a piece: with ``form="json"`` JSON objects joined by
        ``", "``, the text that ``json.dumps`` gives for :meth:`dicts`; with ``"csv"`` CSV lines, the text
        that ``csv.writer`` gives for the rows' :data:`ROW_KEYS` values. Strings are written by those
        encoders, numbers by the ``repr`` they call. A batch is one ``str.join`` of its rows' pieces: the
        text of each varying value and the row's text between them, into which a value that the batch
        shares is written once.

        >>> rows = LoadRows()
        >>> rows.append(LoadRow("s.log", 7, None, 0, kv_cache_usage_pct=41.5, event="oom"))
        0
        >>> import json
        >>> next(rows.texts()) == json.dumps(next(rows.dicts()))
        True
        >>> next(rows.texts("csv"))
        's.log,7,,0,41.5,,,,,,,,,oom\\n'
        """
        pieces, between = FORMS[form].pieces, FORMS[form].between
        texts_of = [
            None if key in ("source", "time", "event") else NumberTexts(key in _FLOAT_FIELDS, repeating)
            for key, repeating in zip(ROW_KEYS, _REPEATING_NUMBERS)
        ]
        for columns in self.columns(form):
            count = len(columns[0])
            # each varying column between the row's text before and after it (a shared value written in)
            parts: list = [pieces[0]]
            for column, piece, texts in zip(columns, pieces[1:], texts_of):
                value = shared_value(column)
                if value is None:
                    parts += [column if texts is None else texts.of(column), piece]
                else:
                    parts[-1] += f"{value}{piece}"
            parts[-1] += between
            if len(parts) == 1:
                yield (parts[0] * count)[: len(parts[0]) * count - len(between)]
                continue
            streams = [part if isinstance(part, list) else itertools.repeat(part, count) for part in parts]
            text = "".join(itertools.chain.from_iterable(zip(*streams)))
            yield text[: len(text) - len(between)]

    def columns(self, form: str | None = None) -> Iterator[list[list]]:
        """The :data:`ROW_KEYS` columns of each run of up to :data:`JSON_BATCH` rows, values as
        :meth:`dicts` gives them (unknown = ``None``, times as text); with ``form`` (``"json"``, ``"csv"``),
        strings and unknowns as their text in that form (numbers stay numbers).

        >>> rows = LoadRows()
        >>> rows.append(LoadRow("s.log", 7, datetime(2026, 11, 29, 10, 0, 10), 0, kv_cache_usage_pct=41.5))
        0
        >>> [column[0] for column in next(rows.columns())][:5]
        ['s.log', 7, '2026-11-29T10:00:10', 0, 41.5]
        >>> [column[0] for column in next(rows.columns("json"))][:8]
        ['"s.log"', 7, '"2026-11-29T10:00:10"', 0, 41.5, 'null', 'null', 'null']
        """
        self._flush()
        caches: tuple[dict, dict, dict] = ({}, {}, {})
        quote, unknown = (FORMS[form].quote, FORMS[form].unknown) if form else (_same, None)
        # a time's text holds digits, '-', ':', 'T', ' ' and '.': nothing to escape
        mark = '"' if form == "json" else ""
        for start in range(0, len(self), JSON_BATCH):
            batch = [column[start : start + JSON_BATCH].tolist() for column in self._columns]
            sources, events = batch[0], batch[-1]
            times = time_texts(batch[_TIME], batch[_YEAR_KNOWN], unknown, mark, caches)
            yield [
                [quote(self._sources[sources[0]])] * len(sources)
                if sources.count(sources[0]) == len(sources)
                else [quote(self._sources[code]) for code in sources],
                batch[1],
                times,
                *(known_numbers(batch[position], unknown) for position in _JSON_POSITIONS[3:-1]),
                [quote(_EVENT_CODES[code]) for code in events] if any(events) else [unknown] * len(events),
            ]

    def source_runs(self) -> Iterator[tuple[str, LoadRows]]:
        """(source, rows) for each run of consecutive rows from one source, in order."""
        self._flush()
        codes = self._columns[0]
        if not codes or codes.count(codes[0]) == len(codes):
            yield from ([(self._sources[codes[0]], self)] if codes else [])
            return
        start = 0
        for index in range(1, len(codes) + 1):
            if index == len(codes) or codes[index] != codes[start]:
                yield self._sources[codes[start]], self._slice(start, index)
                start = index

    def _slice(self, start: int, stop: int) -> LoadRows:
        part = LoadRows()
        part._sources, part._source_index = list(self._sources), dict(self._source_index)
        part._columns = [column[start:stop] for column in self._columns]
        part._raw = {index - start: raw for index, raw in self._raw.items() if start <= index < stop}
        return part

    @classmethod
    def concat(cls, parts: Iterable[Sequence[LoadRow]]) -> LoadRows:
        """One table of the rows of ``parts`` (tables or row sequences), in order."""
        table = cls()
        for part in parts:
            if isinstance(part, LoadRows):
                part._flush()
                table._flush()  # the rows appended before come first
                offset = len(table)
                codes = [table.source_code(source) for source in part._sources]
                for position, (column, theirs) in enumerate(zip(table._columns, part._columns)):
                    column.extend(
                        theirs if position or codes == list(range(len(codes))) else [codes[c] for c in theirs]
                    )
                table._raw.update({offset + index: raw for index, raw in part._raw.items()})
            else:
                for row in part:
                    table.append(row)
        return table
