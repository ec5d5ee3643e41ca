"""A run's load rows kept compactly: :class:`LoadRows` (packed records), :class:`LoadReading`, combining.

What the load readers return: the rows of every file of one load-test run with its warnings and per-file
facts (:class:`~kvplan.load_rows.LoadSource`). A reader packs its rows into :class:`LoadRows` (about 120
bytes a row, so memory follows the rows, never the input's text); :meth:`LoadReading.json_chunks` writes
them as JSON with the C encoder, a row a line.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from kvplan.load_rows import (
    EVENTS,
    KINDS,
    ROW_KEYS,
    LoadFormatError,
    LoadRow,
    LoadSource,
)

ROW_FIELDS = (*ROW_KEYS[:-1], "kind", "year_known", "restarts")  # a LoadRows row, before "event"
_INT_FIELDS = {
    "line",
    "time",
    "engine",
    "running",
    "waiting",
    "swapped",
    "preemptions",
    "preemptions_total",
    "restarts",
}
_FLOAT_FIELDS = {
    "kv_cache_usage_pct",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "prefix_cache_hit_pct",
}
_LAYOUT = struct.Struct(
    "<"
    + "".join(  # little-endian: a row's first two bytes are its source index
        "H" if name == "source" else "q" if name in _INT_FIELDS else "d" if name in _FLOAT_FIELDS else "B"
        for name in (*ROW_FIELDS, "event")
    )
)
_MISSING = UNKNOWN_NUMBER = -(2**63)  # an unknown whole number
_EPOCH = datetime(1, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
_EVENT_CODES = (None, *EVENTS)
_JSON_POSITIONS = tuple(ROW_FIELDS.index(key) if key != "event" else len(ROW_FIELDS) for key in ROW_KEYS)
_EMPTY = tuple(
    math.nan
    if name in _FLOAT_FIELDS
    else "log"
    if name == "kind"
    else True
    if name == "year_known"
    else _MISSING
    for name in ROW_FIELDS[3:]
)
_KIND = ROW_FIELDS[3:].index("kind")  # in a row's values after source, line and time
_FLOAT_POSITIONS = tuple(position for position, name in enumerate(ROW_FIELDS) if name in _FLOAT_FIELDS)
_DAY = 86_400_000_000  # µs
JSON_BATCH = 4096  # rows per piece of :meth:`LoadReading.json_chunks`


def _time_text(micros: int, year_known: bool, days: dict, clocks: dict[int, str]) -> str:
    """:attr:`LoadRow.time_text` of a time given in µs since year 1 (``days`` and ``clocks`` cache each
    day's and each second of the day's text).

    >>> _time_text((datetime(2026, 11, 29, 10, 0, 10, 5) - _EPOCH) // _MICROSECOND, True, {}, {})
    '2026-11-29T10:00:10.000005'
    """
    day, rest = divmod(micros, _DAY)
    prefix = days.get((day, year_known))
    if prefix is None:
        date = _EPOCH + timedelta(days=day)
        prefix = days[day, year_known] = (
            f"{date.year:04d}-{date.month:02d}-{date.day:02d}T"
            if year_known
            else f"{date.month:02d}-{date.day:02d} "
        )
    seconds, fraction = divmod(rest, 1_000_000)
    clock = clocks.get(seconds)
    if clock is None:
        minutes, second = divmod(seconds, 60)
        clock = clocks[seconds] = f"{minutes // 60:02d}:{minutes % 60:02d}:{second:02d}"
    return f"{prefix}{clock}.{fraction:06d}" if fraction and year_known else prefix + clock


def _known_numbers(column: Sequence, unknown: str | None = None) -> Sequence:
    """A column of packed numbers with the unknown ones (the sentinel, a float ``NaN`` or ``±Inf``) as
    ``unknown``; the column itself when all are known.

    >>> _known_numbers((1, _MISSING)), _known_numbers((1.5, math.nan), "null"), _known_numbers((2, 3))
    ([1, None], [1.5, 'null'], (2, 3))
    """
    if _MISSING not in column and all(map(math.isfinite, column)):
        return column
    return [unknown if value == _MISSING or value - value != 0 else value for value in column]


def _same(value):
    return value


class LoadRows(Sequence):
    """:class:`LoadRow` s kept packed, one fixed-size record of bytes each (about 120 bytes a row).

    What the load readers return for a file of any size: a stats log of 800,000 lines keeps its rows in
    about 100 MB instead of 1 GB of objects. Indexing and iteration give :class:`LoadRow` s; :meth:`dicts`
    gives the JSON rows straight from the bytes. Unknown numbers are kept as sentinels (a float ``NaN`` or
    ``±Inf`` reads back as unknown, as :func:`finite` does); ``raw`` is kept for event rows only (what a
    check quotes), a stats row's provenance is its source and line.

    >>> rows = LoadRows()
    >>> rows.append(LoadRow("s.log", 7, datetime(2026, 11, 29, 10, 0, 10), 0, kv_cache_usage_pct=41.5))
    0
    >>> rows.set(0, "running", 12)
    >>> rows[0].running, rows[0].kv_cache_usage_pct, rows[0].waiting, len(rows)
    (12, 41.5, None, 1)
    """

    def __init__(self) -> None:
        self._data = bytearray()
        self._raw: dict[int, str] = {}
        self._sources: list[str] = []
        self._source_index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._data) // _LAYOUT.size

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same rows (a tuple of :class:`LoadRow` s included)."""
        if not isinstance(other, Sequence) or isinstance(other, str) or len(other) != len(self):
            return False
        return all(mine == theirs for mine, theirs in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # mutable while a reader fills it

    def _source(self, source: str) -> int:
        index = self._source_index.get(source)
        if index is None:
            index = self._source_index[source] = len(self._sources)
            self._sources.append(source)
        return index

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
        packed[_KIND] = KINDS.index(packed[_KIND])
        when = _MISSING if time is None else (time - _EPOCH) // _MICROSECOND
        index = len(self)
        try:
            self._data += _LAYOUT.pack(self._source(source), line, when, *packed, _EVENT_CODES.index(event))
        except struct.error as exc:
            raise LoadFormatError(f"{source}:{line}: a number too large to hold ({exc})") from None
        if event is not None and raw:
            self._raw[index] = raw
        return index

    def source_code(self, source: str) -> int:
        """The number that stands for ``source`` in packed rows (see :meth:`add_packed`)."""
        return self._source(source)

    def add_packed(self, *fields) -> None:
        """Append a row given packed (a reader's fast path): the :meth:`source_code`, the line, the time in
        µs since year 1, the other :data:`ROW_FIELDS` (an unknown whole number is :data:`UNKNOWN_NUMBER`,
        an unknown float ``NaN``, ``kind`` its index in :data:`KINDS`) and the event's code (0: none).
        A number beyond its field raises ``struct.error`` and appends nothing.

        >>> rows = LoadRows()
        >>> nan = math.nan
        >>> rows.add_packed(rows.source_code("s.log"), 7, UNKNOWN_NUMBER, 0, 41.5, 3, 0, UNKNOWN_NUMBER,
        ...                 nan, nan, nan, 0, UNKNOWN_NUMBER, 0, True, 0, 0)
        >>> rows[0] == LoadRow("s.log", 7, None, 0, kv_cache_usage_pct=41.5, running=3, waiting=0, preemptions=0)
        True
        """
        self._data += _LAYOUT.pack(*fields)

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
        self._data[index * _LAYOUT.size : (index + 1) * _LAYOUT.size] = replacement._data
        if replacement._raw:
            self._raw[index] = replacement._raw[0]

    def shift_times(self, shift: timedelta) -> None:
        """Add ``shift`` to every known time (a log's local times turned into UTC)."""
        micros, position = shift // _MICROSECOND, ROW_FIELDS.index("time")
        offset = struct.calcsize("<" + _LAYOUT.format[1 : 1 + position])
        for start in range(offset, len(self._data), _LAYOUT.size):
            (value,) = struct.unpack_from("<q", self._data, start)
            if value != _MISSING:
                struct.pack_into("<q", self._data, start, value + micros)

    def _values(self, index: int) -> list:
        """Row ``index`` in :data:`ROW_FIELDS` order plus ``event`` (``None`` = unknown; the time in µs)."""
        values = [
            None if value == _MISSING else value
            for value in _LAYOUT.unpack_from(self._data, index * _LAYOUT.size)
        ]
        for position in _FLOAT_POSITIONS:
            value = values[position]
            if value is not None and value - value != 0:  # NaN or ±Inf
                values[position] = None
        values[0] = self._sources[values[0]]
        values[_KIND + 3], values[_KIND + 4] = KINDS[values[_KIND + 3]], bool(values[_KIND + 4])
        values[-1] = _EVENT_CODES[values[-1]]
        return values

    def _time(self, values: list) -> list:
        """``values`` with the time (µs since year 1) as a ``datetime``."""
        if values[2] is not None:
            values[2] = _EPOCH + values[2] * _MICROSECOND
        return values

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("load row index out of range")
        values = self._time(self._values(index))
        fields = dict(zip(ROW_FIELDS, values))
        return LoadRow(**fields, event=values[-1], raw=self._raw.get(index, ""))

    def __iter__(self) -> Iterator[LoadRow]:
        return (self[index] for index in range(len(self)))

    def dicts(self) -> Iterator[dict]:
        """Each row's :meth:`LoadRow.to_dict`, from the packed bytes (no :class:`LoadRow` is built)."""
        for columns in self.columns():
            yield from map(dict, map(zip, itertools.repeat(ROW_KEYS), zip(*columns)))

    def tuples(self) -> Iterator[tuple]:
        """Each row's :data:`ROW_KEYS` values, in that order, as :meth:`dicts` gives them."""
        for columns in self.columns():
            yield from zip(*columns)

    def json_texts(self) -> Iterator[str]:
        """The rows as JSON objects joined by ``", "``, :data:`JSON_BATCH` rows a piece: the text that
        ``json.dumps`` gives for :meth:`dicts` (strings encoded by its C encoder, numbers by the
        ``repr`` it calls), formatted a batch at a time.

        >>> rows = LoadRows()
        >>> rows.append(LoadRow("s.log", 7, None, 0, kv_cache_usage_pct=41.5, event="oom"))
        0
        >>> next(rows.json_texts()) == json.dumps(next(rows.dicts()))
        True
        """
        row = "{" + ", ".join(f"{json.dumps(key)}: %s" for key in ROW_KEYS) + "}"
        templates: dict[int, str] = {}  # rows in a batch → the batch's format
        for columns in self.columns(json_text=True):
            count = len(columns[0])
            template = templates.get(count) or templates.setdefault(count, ", ".join([row] * count))
            yield template % tuple(itertools.chain.from_iterable(zip(*columns)))

    def columns(self, json_text: bool = False) -> Iterator[list[Sequence]]:
        """The :data:`ROW_KEYS` columns of each run of up to :data:`JSON_BATCH` rows, values as
        :meth:`dicts` gives them (unknown = ``None``, times as text), one batch unpacked at a time; with
        ``json_text``, strings and unknowns as their JSON text (numbers stay numbers).

        >>> rows = LoadRows()
        >>> rows.append(LoadRow("s.log", 7, datetime(2026, 11, 29, 10, 0, 10), 0, kv_cache_usage_pct=41.5))
        0
        >>> [column[0] for column in next(rows.columns())][:5]
        ['s.log', 7, '2026-11-29T10:00:10', 0, 41.5]
        >>> [column[0] for column in next(rows.columns(json_text=True))][:8]
        ['"s.log"', 7, '"2026-11-29T10:00:10"', 0, 41.5, 'null', 'null', 'null']
        """
        size, days, clocks = _LAYOUT.size, {}, {}
        quote, unknown = (json.dumps, "null") if json_text else (_same, None)
        for start in range(0, len(self._data), JSON_BATCH * size):
            packed = list(zip(*_LAYOUT.iter_unpack(self._data[start : start + JSON_BATCH * size])))
            sources, events = packed[0], packed[-1]
            times = [
                unknown if micros == _MISSING else _time_text(micros, known, days, clocks)
                for micros, known in zip(packed[2], packed[_KIND + 4])
            ]
            if json_text:  # a time's text holds digits, '-', ':', 'T', ' ' and '.': nothing to escape
                times = [text if text is unknown else f'"{text}"' for text in times]
            yield [
                [quote(self._sources[sources[0]])] * len(sources)
                if sources.count(sources[0]) == len(sources)
                else [quote(self._sources[code]) for code in sources],
                packed[1],
                times,
                *(_known_numbers(packed[position], unknown) for position in _JSON_POSITIONS[3:-1]),
                [quote(_EVENT_CODES[code]) for code in events] if any(events) else [unknown] * len(events),
            ]

    def source_runs(self) -> Iterator[tuple[str, LoadRows]]:
        """(source, rows) for each run of consecutive rows from one source, in order."""
        size, data = _LAYOUT.size, self._data
        codes = [low | high << 8 for low, high in zip(data[0::size], data[1::size])]
        start = 0
        for index in range(1, len(codes) + 1):
            if index == len(codes) or codes[index] != codes[start]:
                if start == 0 and index == len(codes):
                    yield self._sources[codes[0]], self
                else:
                    yield self._sources[codes[start]], self._slice(start, index)
                start = index

    def _slice(self, start: int, stop: int) -> LoadRows:
        part = LoadRows()
        part._sources, part._source_index = list(self._sources), dict(self._source_index)
        part._data = self._data[start * _LAYOUT.size : stop * _LAYOUT.size]
        part._raw = {index - start: raw for index, raw in self._raw.items() if start <= index < stop}
        return part

    @classmethod
    def concat(cls, parts: Iterable[Sequence[LoadRow]]) -> LoadRows:
        """One table of the rows of ``parts`` (tables or row sequences), in order."""
        table = cls()
        for part in parts:
            if isinstance(part, LoadRows):
                offset = len(table)
                index_map = [table._source(source) for source in part._sources]
                if index_map == list(range(len(part._sources))):
                    table._data += part._data
                else:
                    for position in range(len(part)):
                        record = bytearray(
                            part._data[position * _LAYOUT.size : (position + 1) * _LAYOUT.size]
                        )
                        struct.pack_into("<H", record, 0, index_map[struct.unpack_from("<H", record)[0]])
                        table._data += record
                table._raw.update({offset + index: raw for index, raw in part._raw.items()})
            else:
                for row in part:
                    table.append(row)
        return table


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
        :class:`LoadRows` a batch at a time, see :meth:`LoadRows.json_texts`; others by the C encoder).

        >>> reading = LoadReading((LoadRow("a.log", 3, None, 0),), ("w",))
        >>> "".join(reading.json_chunks()) == json.dumps(reading.to_dict()) + chr(10)
        True
        """
        encode = json.JSONEncoder(allow_nan=False, check_circular=False).encode  # C, no indent
        if isinstance(self.rows, LoadRows):
            texts = self.rows.json_texts()
        else:
            dicts = self.row_dicts()
            batches = iter(lambda: list(itertools.islice(dicts, JSON_BATCH)), [])
            texts = (encode(batch)[1:-1] for batch in batches)
        yield '{"rows": ['
        for number, text in enumerate(texts):
            yield text if number == 0 else ", " + text
        yield f'], "warnings": {encode(list(self.warnings))}}}\n'

    def row_values(self) -> Iterator[tuple]:
        """Each row's :data:`ROW_KEYS` values as a tuple, for CSV writers (``None`` = unknown)."""
        if isinstance(self.rows, LoadRows):
            return self.rows.tuples()
        return (tuple(row.values()) for row in self.row_dicts())

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
