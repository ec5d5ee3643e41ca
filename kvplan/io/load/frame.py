"""The :data:`~kvplan.columns.LOAD_COLUMNS` frame, built by a :class:`RowBuilder`; a :class:`LoadReading` is
that frame, its :class:`~kvplan.io.metadata.ReadMetadata` and each file's :class:`LoadSource`."""

from __future__ import annotations

import collections
import csv
import io
import itertools
import math
import operator
import struct
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import IO, Any

import numpy as np
import orjson
import pandas as pd

from kvplan.columns import LOAD_COLUMNS, LOAD_ROW_KEYS
from kvplan.io.metadata import ReadMetadata
from kvplan.notes import Note

EVENTS = ("preemption", "oom", "error")
KINDS = ("log", "metrics")
UNKNOWN_NUMBER = -(2**63)  # an unknown whole number (and time) in a builder's column
EPOCH = datetime(1, 1, 1)  # a builder keeps times in µs since then
MICROSECOND = timedelta(microseconds=1)
JSON_BATCH = 4096  # rows per piece of the JSON text
MAX_LINE_CHARS = 1 << 24  # the startup reader's 16 MiB line cap: a longer line is refused, never held
READ_CHARS = 1 << 20  # characters read at a time
_UNIX_MICROS = (datetime(1970, 1, 1) - EPOCH) // MICROSECOND
_NUMBERS = [name for name, dtype in LOAD_COLUMNS.items() if dtype in ("Int64", "Float64")]
#: each builder column's array type: 64-bit whole numbers and floats, one byte for codes
_TYPES = {
    "source": "i",
    "time": "q",
    **{name: "q" if LOAD_COLUMNS[name] == "Int64" else "d" for name in _NUMBERS},
    "event": "B",
    "kind": "B",
    "year_known": "B",
}
_FIELDS = tuple(_TYPES)
_LAYOUT = struct.Struct("<" + "".join(_TYPES.values()))  # one row, to check that each value fits
_EVENT_CODES = (None, *EVENTS)
_NUMPY_TYPES = {"Int64": "int64", "Float64": "float64", "boolean": "bool"}  # a JSON column's values


class LoadFormatError(ValueError):
    """A load-test file kvplan cannot read; the message names the file, the line and what was expected."""


@dataclass(frozen=True)
class LoadSource:
    """What a file says of its server: KV capacity [tokens], manual KV bytes, preemptions, UTC offset [h]."""

    source: str
    kind: str
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    reports_preemptions: bool = True
    utc_offset_hours: float | None = None


class RowBuilder:
    """Load rows in typed columns (about 100 bytes a row), added one or a run (:meth:`extend`) at a time."""

    def __init__(self) -> None:
        self._columns: dict[str, array] = {name: array(code) for name, code in _TYPES.items()}
        self._raw: dict[int, str] = {}
        self._sources: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._columns["line"])

    def source_code(self, source: str) -> int:
        """The number that stands for ``source`` in the ``source`` column (see :meth:`extend`)."""
        return self._sources.setdefault(source, len(self._sources))

    def add(self, row: Mapping[str, Any]) -> None:
        """Append a row of :data:`LOAD_COLUMNS` values (missing: unknown; else a log row, year known)."""
        time = row.get("time")
        fields = [
            self.source_code(row["source"]),
            UNKNOWN_NUMBER if time is None else (time - EPOCH) // MICROSECOND,
            *(_packed(row.get(name), LOAD_COLUMNS[name]) for name in _NUMBERS),
            _EVENT_CODES.index(row.get("event")),
            KINDS.index(row.get("kind") or "log"),
            row.get("year_known") is None or bool(row.get("year_known")),
        ]
        if row.get("restarts") is None:
            fields[_FIELDS.index("restarts")] = 0
        try:
            _LAYOUT.pack(*fields)
        except struct.error as exc:
            raise LoadFormatError(
                f"{row['source']}:{row['line']}: a number too large to hold ({exc})"
            ) from None
        for column, value in zip(self._columns.values(), fields):
            column.append(value)  # each fits: checked by _LAYOUT
        if row.get("event") is not None and row.get("raw"):
            self._raw[len(self) - 1] = row["raw"]

    def extend(self, count: int, columns: Mapping[str, Any]) -> None:
        """Append ``count`` rows, a column's values or one shared value each (codes; time in µs since year 1)."""
        for name, column in self._columns.items():
            values = columns[name]
            if isinstance(values, (int, float)):
                column.extend(array(column.typecode, [values]) * count)
            else:
                column.frombytes(struct.pack(f"{count}{column.typecode}", *values))

    def frame(self) -> pd.DataFrame:
        """The rows as the :data:`LOAD_COLUMNS` frame (unknown, ``NaN``, ``±Inf``: ``NA``); empties the builder."""
        count, columns = len(self), self._columns
        sources = np.array(list(self._sources), dtype=object)
        codes = np.frombuffer(columns.pop("source"), dtype=np.int32)
        data = {"source": pd.array(sources[codes] if len(sources) else [], dtype="string")}
        micros = np.frombuffer(columns.pop("time"), dtype=np.int64)
        data["time"] = np.where(micros == UNKNOWN_NUMBER, micros, micros - _UNIX_MICROS).view(
            "datetime64[us]"
        )
        for name in _NUMBERS:
            values = np.array(columns.pop(name), dtype=_TYPES[name])
            if _TYPES[name] == "q":
                data[name] = pd.arrays.IntegerArray(values, values == UNKNOWN_NUMBER)
            else:
                data[name] = pd.arrays.FloatingArray(values, ~np.isfinite(values))
        for name, names in (("event", _EVENT_CODES), ("kind", KINDS)):
            texts = np.array(names, dtype=object)[np.frombuffer(columns.pop(name), dtype=np.uint8)]
            data[name] = pd.array(texts, dtype="string")
        data["year_known"] = pd.array(np.frombuffer(columns.pop("year_known"), np.uint8) == 1, "boolean")
        raw = np.full(count, None, dtype=object)
        raw[list(self._raw)] = list(self._raw.values())
        data["raw"] = pd.array(raw, dtype="string")
        return pd.DataFrame(data, columns=list(LOAD_COLUMNS), copy=False)


def _packed(value: object, dtype: str) -> object:
    """A column's value as a builder keeps it: an unknown as :data:`UNKNOWN_NUMBER` or ``NaN``."""
    if dtype == "Float64":
        return math.nan if value is None else float(value)  # type: ignore[arg-type]
    return UNKNOWN_NUMBER if value is None else value


def bounded_lines(stream: IO[str], source: str) -> Iterator[str]:
    """The lines of a text file without their break; a longer one than :data:`MAX_LINE_CHARS` is refused."""
    tail, number = "", 0
    for block in iter(lambda: stream.read(READ_CHARS), ""):
        lines = (tail + block).split("\n")
        tail = lines.pop()
        # only the line the last block left unfinished can be longer than a block
        for long, at in ((lines[:1], number + 1), ([tail], number + len(lines) + 1)):
            if long and len(long[0]) > MAX_LINE_CHARS:
                raise LoadFormatError(
                    f"{source}:{at}: a line longer than 16 MiB ({MAX_LINE_CHARS:,} characters); expected "
                    "a vLLM server log or a saved /metrics snapshot, whose lines are short"
                )
        number += len(lines)
        yield from lines
    if tail:
        yield tail


def frame_of(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The load frame of rows given as mappings of :data:`LOAD_COLUMNS` names (``source``, ``line`` required)."""
    builder = RowBuilder()
    for row in rows:
        builder.add(row)
    return builder.frame()


def time_texts(frame: pd.DataFrame) -> np.ndarray:
    """Each row's time as ``datetime.isoformat`` writes it, vLLM's ``MM-DD HH:MM:SS`` when the year is
    unknown, ``None`` when the time is.

    >>> time_texts(frame_of([{"source": "a", "line": 1, "time": datetime(2000, 11, 29, 10, 0, 10),
    ...     "year_known": False}, {"source": "a", "line": 2, "time": datetime(2026, 1, 2, 3, 4, 5, 6)},
    ...     {"source": "a", "line": 3}])).tolist()
    ['11-29 10:00:10', '2026-01-02T03:04:05.000006', None]
    """
    times = frame["time"].to_numpy(dtype="datetime64[us]")
    seconds = times.astype("datetime64[s]").astype(str)
    texts = seconds.astype(object)
    fraction = (times.view(np.int64) % 1_000_000 != 0) & ~np.isnat(times)
    if fraction.any():
        texts[fraction] = times[fraction].astype(str)
    yearless = ~frame["year_known"].to_numpy(dtype=bool, na_value=True) & ~np.isnat(times)
    if yearless.any():  # "MM-DD HH:MM:SS" cut out of "YYYY-MM-DDTHH:MM:SS", a column of characters at a time
        chars = seconds[yearless].view("U1").reshape(yearless.sum(), -1)
        cut = [chars[:, 5:10], np.full((len(chars), 1), " "), chars[:, 11:19]]
        texts[yearless] = np.concatenate(cut, axis=1).view("U14").ravel()
    texts[np.isnat(times)] = None
    return texts


def json_values(column: pd.Series) -> list:
    """A column's values as JSON values (Python scalars, unknown ``None``)."""
    numpy_type = _NUMPY_TYPES.get(str(column.dtype))
    if numpy_type is None:
        return column.to_numpy(object, na_value=None).tolist()
    missing = column.isna().to_numpy()
    if missing.all():
        return [None] * len(column)
    values = column.to_numpy(numpy_type, na_value=0).tolist()
    for position in np.flatnonzero(missing).tolist():
        values[position] = None
    return values


@dataclass(frozen=True, eq=False)
class LoadReading:
    """A load-test run: frame, metadata, each file's :class:`LoadSource`; unpacks as ``frame, metadata``."""

    frame: pd.DataFrame
    metadata: ReadMetadata = field(default_factory=ReadMetadata)
    sources: tuple[LoadSource, ...] = ()

    def __iter__(self) -> Iterator:
        return iter((self.frame, self.metadata))

    def __len__(self) -> int:
        return len(self.frame)

    @property
    def warnings(self) -> tuple[Note, ...]:
        return self.metadata.warnings

    @property
    def kv_cache_tokens(self) -> int | None:
        """The run's KV capacity in tokens when its files state one value; ``None`` otherwise."""
        values = {s.kv_cache_tokens for s in self.sources if s.kv_cache_tokens is not None}
        return values.pop() if len(values) == 1 else None

    def records(self, rows: slice | Sequence[int] = slice(None)) -> list[dict]:
        """The ``rows`` (positions) as the JSON rows of ``kvplan load --json`` (:data:`LOAD_ROW_KEYS`)."""
        columns = self._columns(rows)  # dicts filled a column at a time: a third cheaper than by rows
        records = list(map(dict.copy, itertools.repeat(dict.fromkeys(LOAD_ROW_KEYS), len(columns[0]))))
        for key, values in zip(LOAD_ROW_KEYS, columns):  # deque(maxlen=0) runs the map to its end
            collections.deque(map(operator.setitem, records, itertools.repeat(key), values), maxlen=0)
        return records

    def _columns(self, rows: slice | Sequence[int]) -> list[list]:
        part = self.frame.iloc[rows]
        return [time_texts(part).tolist() if k == "time" else json_values(part[k]) for k in LOAD_ROW_KEYS]

    def json_chunks(self) -> Iterator[bytes]:
        """``{"rows": [...], "warnings": [...]}`` and a newline as JSON (orjson), :data:`JSON_BATCH` rows a piece."""
        yield b'{"rows":['
        for start in range(0, len(self.frame), JSON_BATCH):
            text = orjson.dumps(self.records(slice(start, start + JSON_BATCH)))
            yield text[1:-1] if start == 0 else b"," + text[1:-1]
        yield b'],"warnings":' + orjson.dumps(list(map(str, self.warnings))) + b"}\n"

    def write_csv(self, stream: IO[str]) -> None:
        """Write the rows as CSV (:data:`LOAD_ROW_KEYS`, unknown empty) by ``to_csv``'s writer, a batch at a time."""
        for start in range(0, max(len(self.frame), 1), JSON_BATCH):
            batch = io.StringIO()
            writer = csv.writer(batch, lineterminator="\n")
            if start == 0:
                writer.writerow(LOAD_ROW_KEYS)
            writer.writerows(zip(*self._columns(slice(start, start + JSON_BATCH))))
            stream.write(batch.getvalue())


def reading_of(
    frames: Sequence[pd.DataFrame], warnings: Iterable[str], sources: Sequence[LoadSource]
) -> LoadReading:
    """One reading from frames of one run, its warnings (text becomes a :class:`Note`) and files' facts."""
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    notes = tuple(w if isinstance(w, Note) else Note(w) for w in warnings)
    return LoadReading(frame, ReadMetadata(tuple(s.source for s in sources), notes), tuple(sources))


def counter_increase(previous: float | None, current: float | None) -> float | None:
    """Increase of a counter between two scrapes; after a reset (it went down) the new value, as ``rate()``."""
    if previous is None or current is None:
        return None
    return current - previous if current >= previous else current


def percent(fraction: float) -> float:
    """A 0–1 fraction as a 0–100 percentage, without float noise."""
    return round(fraction * 100, 6)
