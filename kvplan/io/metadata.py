"""What a reader is given (:class:`RoomRule`) and returns beside its frame (:class:`ReadMetadata`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import Protocol

import pandas as pd

from kvplan.notes import Note

#: Columns of :attr:`ReadMetadata.provenance`: one row per value read.
PROVENANCE_COLUMNS = ["source", "line", "boot", "rank", "column", "value", "raw"]


def provenance_part(rows: Sequence[tuple]) -> pd.DataFrame:
    """Provenance rows (:data:`PROVENANCE_COLUMNS` tuples) as a frame: 50 bytes a row (a tuple takes 200)."""
    cells = list(zip(*rows)) or [()] * len(PROVENANCE_COLUMNS)
    dtypes = ("category", "Int64", "Int64", "Int64", "category", object, object)
    columns = zip(PROVENANCE_COLUMNS, cells, dtypes)  # pd.array: a third cheaper than a Series a column
    return pd.DataFrame({name: pd.array(list(c), dtype=dtype) for name, c, dtype in columns}, copy=False)


class EvidenceLines(Mapping):
    """Read-only ``(source, boot, rank, column) → line`` of the values refusals quote (rank ``-1``: the key;
    column ``boot``: its first line), made by ``build`` on first use."""

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


#: Where a file's raw lines are read back from: its path, its bytes, or None (the text is kept instead).
LineSource = str | bytes | bytearray | None


@dataclass(frozen=True)
class RawLines:
    """``source → (path or bytes, line end)``: where a provenance ``raw`` that is a byte offset is read back."""

    files: Mapping[str, tuple[LineSource, bytes]] = field(default_factory=dict)

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
    """What came with a frame: sources, warnings, provenance, line index, boots, kind."""

    sources: tuple[str, ...] = ()
    warnings: tuple[Note, ...] = ()
    lines: EvidenceLines = field(default_factory=EvidenceLines)
    boots: tuple[dict, ...] = ()
    provenance_parts: tuple[pd.DataFrame, ...] = ()  # :func:`provenance_part` frames, raw as kept
    raw_lines: RawLines = field(default_factory=RawLines)
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
        parts = self.provenance_parts
        data = {name: list(chain(*(part[name].tolist() for part in parts))) for name in PROVENANCE_COLUMNS}
        data["value"] = pd.DataFrame([(cell,) for cell in data["value"]], columns=["value"])["value"]
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
        added = (text if isinstance(text, Note) else Note(text) for text in notes)
        return dataclasses.replace(self, warnings=(*self.warnings, *added))


_FIELDS = frozenset(f.name for f in dataclasses.fields(ReadMetadata))


def merge_metadata(parts: Sequence[ReadMetadata]) -> ReadMetadata:
    """The metadata of several reads joined in order."""
    if len(parts) == 1:
        return parts[0]
    files = {source: where for part in parts for source, where in part.raw_lines.files.items()}
    lines = {place: line for part in parts for place, line in part.lines.items()}
    return ReadMetadata(
        sources=tuple(source for part in parts for source in part.sources),
        warnings=tuple(note for part in parts for note in part.warnings),
        lines=EvidenceLines(lines),
        boots=tuple(boot for part in parts for boot in part.boots),
        provenance_parts=tuple(frame for part in parts for frame in part.provenance_parts),
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
    """The core's Room rule (:data:`kvplan.room.ROOM_RULE`) a reader fills ``room_bytes`` with (without it: none)."""

    room: RoomOf
    boot_warnings: BootRoomWarnings
