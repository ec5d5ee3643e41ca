"""What a reader is given (:class:`RoomRule`) and returns beside its frame (:class:`ReadMetadata`: files,
warnings, provenance, line index, boots); ``metadata["warnings"]`` reads a field as a ``dict`` did."""

from __future__ import annotations

import dataclasses
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import Protocol

import pandas as pd

from kvplan.notes import Note

#: Columns of :attr:`ReadMetadata.provenance`: one row per value read.
PROVENANCE_COLUMNS = ["source", "line", "boot", "rank", "column", "value", "raw"]


class EvidenceLines(Mapping):
    """Read-only ``(source, boot, rank, column) → line`` of the values refusals quote (rank ``-1``: the boot's
    key; column ``boot``: its first line), made by ``build`` on first use."""

    def __init__(self, items: Iterable | Mapping = (), build: Callable[[], Iterable] | None = None) -> None:
        self._build = build
        if build is None:
            self._lines = dict(items)

    @cached_property
    def _lines(self) -> dict:
        assert self._build is not None  # set whenever _lines was not
        return dict(self._build())

    def __getitem__(self, key: tuple) -> int:
        return self._lines[key]

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._lines)

    def __len__(self) -> int:
        return len(self._lines)


#: "Not available" for a line or rank kept as a 64-bit number in :class:`ProvenanceRows`.
_NO_NUMBER = -(2**63)


def _append(numbers: array, values: Sequence[int]) -> None:
    """Append ``values`` to ``numbers`` in one C pass."""
    numbers.frombytes(struct.pack(f"{len(values)}{numbers.typecode}", *values))


class ProvenanceRows(Sequence):
    """Provenance rows kept in about 50 bytes a row (a tuple takes 200), each back as its tuple.

    >>> rows = ProvenanceRows()
    >>> rows.extend([("a.log", 3, 0, 1, "room_bytes", 5, 120), ("a.log", pd.NA, 0, pd.NA, "block_size", 16, "default")])
    >>> len(rows), rows[0], rows[1][1] is pd.NA, rows[-1][6]
    (2, ('a.log', 3, 0, 1, 'room_bytes', 5, 120), True, 'default')

    ``ordered=True``: one boot's rows, put in order (line, a default first; rank as text; column) on first read:

    >>> rows.extend([("a.log", 9, 1, 0, "outcome", "ok", 700), ("a.log", 4, 1, 0, "room_bytes", 7, 300)], ordered=True)
    >>> [row[1] for row in rows]
    [3, <NA>, 4, 9]
    """

    def __init__(self) -> None:
        self._names: list[str] = []  # sources and columns, each once
        self._index: dict[str, int] = {}
        self._source, self._column = array("i"), array("i")  # indexes into _names: 4 bytes each
        self._line, self._boot, self._rank, self._raw = array("q"), array("q"), array("q"), array("q")
        self._values: list = []
        self._texts: dict[int, str] = {}  # row → raw text (the raw of the other rows is a byte offset)
        self._unordered: list[tuple[int, int]] = []  # (start, stop) of the rows still to put in order

    def _name(self, name: str) -> int:
        code = self._index.get(name)
        if code is None:
            code = self._index[name] = len(self._names)
            self._names.append(name)
        return code

    def extend(self, rows: Iterable[tuple], ordered: bool = False) -> None:
        fields = tuple(zip(*rows))
        if not fields:
            return
        sources, lines, boots, ranks, columns, values, raws = fields
        start = len(self._values)
        if ordered:
            self._unordered.append((start, start + len(values)))
        _append(self._source, self._codes(sources))
        _append(self._line, [_NO_NUMBER if line is pd.NA else line for line in lines])
        _append(self._boot, boots)
        _append(self._rank, [_NO_NUMBER if rank is pd.NA else rank for rank in ranks])
        _append(self._column, self._codes(columns))
        self._values.extend(values)
        numbers = [_NO_NUMBER if isinstance(raw, str) else raw for raw in raws]
        if _NO_NUMBER in numbers:
            self._texts.update((start + row, raw) for row, raw in enumerate(raws) if isinstance(raw, str))
        _append(self._raw, numbers)

    def _codes(self, names: tuple[str, ...]) -> tuple[int, ...]:
        if names.count(names[0]) == len(names):  # a boot's rows come from one source
            return (self._name(names[0]),) * len(names)
        try:
            return itemgetter(*names)(self._index)
        except KeyError:
            return tuple(map(self._name, names))

    def __len__(self) -> int:
        return len(self._values)

    def _order(self) -> None:
        names, texts = self._names, self._texts
        for start, stop in self._unordered:
            order = sorted(
                range(start, stop),
                key=lambda row: (
                    -1 if self._line[row] == _NO_NUMBER else self._line[row],
                    "<NA>" if self._rank[row] == _NO_NUMBER else str(self._rank[row]),
                    names[self._column[row]],
                ),
            )
            for numbers in (self._source, self._line, self._boot, self._rank, self._column, self._raw):
                numbers[start:stop] = array(numbers.typecode, [numbers[row] for row in order])
            self._values[start:stop] = [self._values[row] for row in order]
            moved = {start + place: texts.pop(row) for place, row in enumerate(order) if row in texts}
            texts.update(moved)
        self._unordered = []

    def __getitem__(self, index):  # an int gives a row, a slice a list of rows
        if self._unordered:
            self._order()
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = range(len(self))[index]
        line, rank, raw = self._line[index], self._rank[index], self._raw[index]
        return (
            self._names[self._source[index]],
            pd.NA if line == _NO_NUMBER else line,
            self._boot[index],
            pd.NA if rank == _NO_NUMBER else rank,
            self._names[self._column[index]],
            self._values[index],
            self._texts[index] if raw == _NO_NUMBER else raw,
        )

    def __iter__(self) -> Iterator[tuple]:
        return (self[index] for index in range(len(self)))


#: Where a file's raw lines are read back from: its path, its bytes, or None (the text is kept instead).
LineSource = str | bytes | bytearray | None


@dataclass(frozen=True)
class RawLines:
    """``source → (path or bytes, line end)``: where a provenance ``raw`` that is a byte offset is read back."""

    files: Mapping[str, tuple[LineSource, bytes]] = field(default_factory=dict)

    def line(self, source: str, offset: int) -> str:
        """The line of ``source`` that starts at byte ``offset``, without its line end."""
        return self.lines(source, [offset])[offset]

    def lines(self, source: str, offsets: Iterable[int]) -> dict[int, str]:
        """``offset → line`` for the lines of ``source`` starting at ``offsets``."""
        where, end = self.files.get(source, (None, b"\n"))
        wanted = sorted(set(offsets))
        if where is None:
            return dict.fromkeys(wanted, "")
        if isinstance(where, (bytes, bytearray)):
            found = {}
            for offset in wanted:
                stop = where.find(end, offset)
                found[offset] = bytes(where[offset : stop if stop != -1 else len(where)])
        else:
            with open(where, "rb") as stream:
                found = {}
                for offset in wanted:
                    stream.seek(offset)
                    found[offset] = _read_to(stream, end)
        return {offset: data.decode("utf-8", "replace") for offset, data in found.items()}


def _read_to(stream, end: bytes, block: int = 4096) -> bytes:
    if end == b"\n":
        data = stream.readline()
        return data[:-1] if data.endswith(b"\n") else data
    parts = []
    while True:
        data = stream.read(block)
        stop = data.find(end)
        if stop != -1 or not data:
            parts.append(data[:stop] if stop != -1 else data)
            return b"".join(parts)
        parts.append(data)


@dataclass(frozen=True, eq=False)
class ReadMetadata:
    """What came with a frame: sources, warnings, provenance, line index, boots, ``total_lines`` of a single
    file read and ``kind`` of snapshot."""

    sources: tuple[str, ...] = ()
    warnings: tuple[Note, ...] = ()
    lines: EvidenceLines = field(default_factory=EvidenceLines)
    boots: tuple[dict, ...] = ()
    provenance_rows: Sequence[tuple] = ()
    raw_lines: RawLines = field(default_factory=RawLines)
    total_lines: int | None = None
    kind: str | None = None

    @cached_property
    def provenance(self) -> pd.DataFrame:
        """One row per value read (:data:`PROVENANCE_COLUMNS`), the raw line as logged."""
        frame = self.compact_provenance()
        sources, raws = frame["source"].tolist(), frame["raw"].tolist()
        offsets: dict[str, list[int]] = {}
        for source, raw in zip(sources, raws):
            if isinstance(raw, int):
                offsets.setdefault(source, []).append(raw)
        text = {source: self.raw_lines.lines(source, found) for source, found in offsets.items()}
        frame["raw"] = [
            text[source][raw] if isinstance(raw, int) else raw for source, raw in zip(sources, raws)
        ]
        return frame

    def compact_provenance(self) -> pd.DataFrame:
        """:attr:`provenance` with ``raw`` as kept (a log line's byte offset)."""
        columns: list[list] = [[] for _ in PROVENANCE_COLUMNS]
        appends = [column.append for column in columns]
        for row in self.provenance_rows:
            for append, field_value in zip(appends, row):
                append(field_value)
        data = dict(zip(PROVENANCE_COLUMNS, columns))
        value = PROVENANCE_COLUMNS.index("value")
        data["value"] = pd.DataFrame([(cell,) for cell in columns[value]], columns=["value"])["value"]
        columns[value] = []
        frame = pd.DataFrame(data, columns=PROVENANCE_COLUMNS)
        for column in ("line", "boot", "rank"):
            frame[column] = frame[column].astype("Int64")
        return frame

    def __getitem__(self, name: str) -> object:
        if name not in _FIELDS and name != "provenance":
            raise KeyError(name)
        value = getattr(self, name)
        return list(value) if isinstance(value, tuple) else value

    def with_warnings(self, notes: Iterable[str]) -> ReadMetadata:
        return dataclasses.replace(self, warnings=(*self.warnings, *(_note(text) for text in notes)))


_FIELDS = frozenset(f.name for f in dataclasses.fields(ReadMetadata))


def _note(text: str) -> Note:
    return text if isinstance(text, Note) else Note(text)


def merge_metadata(parts: Sequence[ReadMetadata]) -> ReadMetadata:
    """The metadata of several reads joined in order."""
    if len(parts) == 1:
        return dataclasses.replace(parts[0], total_lines=None)
    files: dict[str, tuple[LineSource, bytes]] = {}
    lines: dict = {}
    for part in parts:
        files.update(part.raw_lines.files)
        lines.update(part.lines)
    return ReadMetadata(
        sources=tuple(source for part in parts for source in part.sources),
        warnings=tuple(note for part in parts for note in part.warnings),
        lines=EvidenceLines(lines),
        boots=tuple(boot for part in parts for boot in part.boots),
        provenance_rows=tuple(row for part in parts for row in part.provenance_rows),
        raw_lines=RawLines(files),
        kind=next((part.kind for part in parts if part.kind), None),
    )


def place_note(code: str, source: str, line: int | None, text: str) -> Note:
    """A warning of kind ``code`` at ``source:line`` (``source`` alone when the line is None)."""
    where = f"{source}:{line}" if line is not None else f"{source}"
    return Note(f"{where}: {text}", code=code, file=source, line=line)


class BootPlace(Protocol):
    """Where a boot is: its index in the file, its first line, its Ray-collapsed lines."""

    index: int
    first_line: int
    ray_repeats: list


#: ``room(values, rank, flags, origin, source, warnings)`` → ``(room_bytes, room_source, (line, raw))``
#: or None; ``flags`` are the boot's ``estimate_applied``, ``eager`` and ``version``.
RoomOf = Callable[[dict, int, dict, dict, str, list], "tuple[int, str, tuple] | None"]
#: ``boot_warnings(rows, key, flags, source, boot, origin)`` → the notes about one boot's rooms.
BootRoomWarnings = Callable[[dict, dict, dict, str, BootPlace, dict], list[Note]]


@dataclass(frozen=True)
class RoomRule:
    """The core's Room rule (:data:`kvplan.room.ROOM_RULE`) a reader fills ``room_bytes`` with; without it, no
    room, and of conflicting observations the one with the least free memory at startup."""

    room: RoomOf
    boot_warnings: BootRoomWarnings
