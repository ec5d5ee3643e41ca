"""Read a ledger CSV (what ``kvplan ledger --csv`` writes, or a hand-made table of rooms) as the log reader reads:
any subset of the glossary's columns, ``rank`` in every row, ``*_bytes`` cells integers or sizes (``18.8GiB``)."""

from __future__ import annotations

import csv
import difflib
import io
import math
import os
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import pandas as pd

from kvplan.columns import (
    BOOL_COLUMNS,
    BYTES_COLUMNS,
    FLOAT_COLUMNS,
    GROUP_RANKS,
    INT_COLUMNS,
    KEY_COLUMNS,
    LAYOUT_FIELDS,
    LEDGER_COLUMNS,
    OUTCOMES,
    ROOM_SOURCES,
)
from kvplan.io.gpu_snapshot import NVIDIA_SMI_HEADERS
from kvplan.io.ledger_frame import ImpossibleValue, check_parallel_size, check_row, ledger_frame
from kvplan.io.metadata import EvidenceLines, ReadMetadata, RoomRule, place_note, provenance_part
from kvplan.notes import Note
from kvplan.releases import version_tuple
from kvplan.units import parse_size

#: Header fields of ``nvidia-smi --query-gpu`` / ``--query-compute-apps`` that are no glossary name.
NVIDIA_SMI_FIELDS = frozenset().union(*NVIDIA_SMI_HEADERS.values()) - set(LEDGER_COLUMNS)
#: Columns whose values are never negative.
_COUNT_COLUMNS = ("boot", "rank", *GROUP_RANKS)
_TRUE, _FALSE = {"true", "1", "yes"}, {"false", "0", "no"}


class LedgerCsvError(ValueError):
    """A ledger CSV that cannot be read; the one-line message names the file and the line or column."""


def read_ledger_csv(
    path: str | os.PathLike, source: str | None = None, room_rule: RoomRule | None = None
) -> tuple[pd.DataFrame, ReadMetadata]:
    """The ledger of one ledger CSV and its metadata; ``source`` names the file.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "rooms.csv"
    >>> _ = path.write_text("rank,room_bytes,outcome\\n0,18.8GiB,ok\\n1,12884901888,ok\\n")
    >>> ledger, meta = read_ledger_csv(path, source="rooms.csv")
    >>> ledger[["source", "boot", "rank", "room_bytes", "room_source"]].values.tolist()
    [['rooms.csv', 0, 0, 20186346291, 'manual'], ['rooms.csv', 0, 1, 12884901888, 'manual']]
    >>> first = meta["provenance"].iloc[0]
    >>> first["source"], int(first["line"]), first["column"], first["raw"]
    ('rooms.csv', 2, 'rank', '0,18.8GiB,ok')
    """
    name = source or str(path)
    data = Path(path).read_bytes()
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise LedgerCsvError(f"{name}:{line}: NUL byte: not a text CSV (compressed or binary?)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise LedgerCsvError(f"{name}:{line}: not UTF-8 text: a ledger CSV is UTF-8") from None
    physical = io.StringIO(text, newline="").readlines()
    records = _records(physical, name)
    if not records:
        raise LedgerCsvError(
            f"{name}: empty: a ledger CSV has a header of glossary column names "
            "(kvplan.columns) and one row per boot × rank"
        )
    header_line, header, _raw = records[0]
    columns = _header(header, header_line, name)
    if len(records) == 1:
        raise LedgerCsvError(f"{name}: no rows below the header: a ledger CSV has one row per boot × rank")
    reader = _Rows(name, columns, room_rule)
    for line, cells, raw in records[1:]:
        reader.row(line, cells, raw)
    return reader.finish()


def _records(physical: list[str], name: str) -> list[tuple[int, list[str], str]]:
    """``(first line, cells, raw text)`` of every non-blank CSV record."""
    reader = csv.reader(physical, skipinitialspace=True)
    records, previous = [], 0
    try:
        for cells in reader:
            start, previous = previous + 1, reader.line_num
            if any(cell.strip() for cell in cells):
                raw = "".join(physical[start - 1 : reader.line_num]).rstrip("\r\n")
                records.append((start, cells, raw))
    except csv.Error as exc:
        raise LedgerCsvError(f"{name}:{reader.line_num}: not a readable CSV: {exc}") from None
    return records


def _header(cells: list[str], line: int, name: str) -> list[str]:
    columns = [cell.strip() for cell in cells]
    fields = {column.split("[")[0].strip().lower() for column in columns}
    uuids = any(column.upper().startswith(("GPU-", "MIG-")) for column in columns[:2])  # no header
    if fields & NVIDIA_SMI_FIELDS or uuids:
        raise LedgerCsvError(
            f"{name}: an nvidia-smi snapshot (--query-gpu or --query-compute-apps CSV), not a vLLM log or a "
            f"ledger CSV: give it as --nvidia-smi {name}, beside the logs of the same boot"
        )
    for position, column in enumerate(columns):
        if column in LEDGER_COLUMNS:
            if column in columns[:position]:
                raise LedgerCsvError(f"{name}:{line}: column {column!r} appears twice in the header")
            continue
        if not column:
            raise LedgerCsvError(
                f"{name}:{line}: column {position + 1} has no name (a DataFrame index? write it with "
                "index=False); every column of a ledger CSV is a glossary name (kvplan.columns)"
            )
        close = difflib.get_close_matches(column.lower(), LEDGER_COLUMNS, n=3, cutoff=0.5)
        hint = f"closest glossary names: {', '.join(close)}" if close else "see kvplan.columns"
        raise LedgerCsvError(f"{name}:{line}: unknown column {column!r}: not a ledger glossary name ({hint})")
    if "rank" not in columns:
        raise LedgerCsvError(
            f"{name}:{line}: no 'rank' column: a ledger CSV has one row per rank, numbered in column 'rank'"
        )
    return columns


class _Rows:
    """CSV records into ledger rows, provenance, evidence lines and warnings."""

    def __init__(self, name: str, columns: list[str], room_rule: RoomRule | None = None) -> None:
        self.name, self.columns, self.room_rule = name, columns, room_rule
        self.rows: list[dict] = []
        self.provenance: list[tuple] = []
        self.lines: dict[tuple, int] = {}
        self.warnings: list[Note] = []
        self.seen: dict[tuple, int] = {}
        self.boots: dict[tuple, list[tuple[int, dict]]] = {}
        self.no_outcome: list[int] = []

    def row(self, line: int, cells: list[str], raw: str) -> None:
        if len(cells) != len(self.columns):
            raise LedgerCsvError(
                f"{self.name}:{line}: {len(cells)} fields, but the header has {len(self.columns)}"
            )
        values: dict[str, Any] = {
            column: _value(column, cell, self.name, line)
            for column, cell in zip(self.columns, cells)
            if cell.strip()
        }
        if "rank" not in values:
            raise LedgerCsvError(
                f"{self.name}:{line}: no rank: every row of a ledger CSV is one rank (column 'rank')"
            )
        source, boot = values.setdefault("source", self.name), values.setdefault("boot", 0)
        rank = values["rank"]
        identity = (source, boot, rank)
        if identity in self.seen:
            raise LedgerCsvError(
                f"{self.name}:{line}: rank {rank} of {source} boot {boot} already has a row "
                f"(line {self.seen[identity]})"
            )
        self.seen[identity] = line
        read = [column for column in self.columns if column in values]
        if "room_bytes" not in self.columns and self.room_rule is not None:
            self._computed_room(values, line, raw, read, self.room_rule)
        elif "room_bytes" in values and "room_source" not in values:
            values["room_source"] = "manual"
            read.append("room_source")
        try:  # the log reader's physical bounds: no GPU shows these values
            for column in LAYOUT_FIELDS:
                check_parallel_size(column, values.get(column), self.name, line)
            check_row(values, rank, {(rank, column): (line, raw) for column in values}, self.name)
        except ImpossibleValue as exc:
            raise LedgerCsvError(str(exc)) from None
        if "outcome" not in values:
            self.no_outcome.append(line)
            if "room_bytes" in values:
                values["outcome"] = "ok"
            else:
                values.update(outcome="incomplete", error="the ledger CSV states no outcome and no room")
                read.append("error")
            read.append("outcome")
        own = source == self.name
        for column in read:
            self.provenance.append((self.name, line, boot, rank, column, values[column], raw))
            if own and (column in ("room_bytes", "outcome") or column in KEY_COLUMNS):
                self.lines[(source, boot, rank, column)] = line
        self.boots.setdefault((source, boot), []).append((line, values))
        if own:
            self.lines.setdefault((source, boot, -1, "boot"), line)
            for column in KEY_COLUMNS:
                if column in values:
                    self.lines.setdefault((source, boot, -1, column), line)
        self.rows.append(values)

    def _computed_room(self, values: dict, line: int, raw: str, read: list[str], rule: RoomRule) -> None:
        """Room from the row's parts, as the log reader computes it."""
        version = version_tuple(values.get("vllm_version"))
        applied, eager = version is not None and version >= (0, 20), values.get("enforce_eager") is True
        flags = {"estimate_applied": applied, "eager": eager, "version": version}
        rank = values["rank"]
        origin = {(rank, column): (line, raw) for column in values}
        stated = values.get("room_source")
        room = rule.room(values, rank, flags, origin, self.name, self.warnings)
        if room is None:
            if stated is not None:
                text = (
                    f"rank {rank}: room_source {stated!r} is stated but the row gives no room_bytes and not the "
                    "parts to compute it"
                )
                self.warnings.append(place_note("room-source-without-room", self.name, line, text))
                values.pop("room_source")
                read.remove("room_source")
            return
        values["room_bytes"], values["room_source"] = room[0], room[1]
        if stated is not None and stated != room[1]:
            text = f"rank {rank}: room_source {stated!r} is stated, but the room was computed from {room[1]}"
            self.warnings.append(place_note("room-source-differs", self.name, line, text))
        read += [column for column in ("room_bytes", "room_source") if column not in read]

    def finish(self) -> tuple[pd.DataFrame, ReadMetadata]:
        if self.no_outcome:
            count = len(self.no_outcome)
            listing = ", ".join(map(str, self.no_outcome[:8])) + (", …" if count > 8 else "")
            text = (
                f"the CSV states no outcome for {count} row(s) (line(s) {listing}): a row with a room is taken as "
                "ok (the rank booted), one without as incomplete; add an 'outcome' column (ok, oom, error, "
                "incomplete) to state it"
            )
            self.warnings.append(place_note("csv-no-outcome", self.name, self.no_outcome[0], text))
        boots = []
        for (source, boot), rows in self.boots.items():  # rows: (line, values) in order
            key = {column: _shared([values for _, values in rows], column) for column in KEY_COLUMNS}
            outcomes = dict(sorted((values["rank"], values.get("outcome")) for _, values in rows))
            boots.append({"source": source, "boot": boot, "first_line": rows[0][0], "last_line": rows[-1][0],
                          "vllm_version": key["vllm_version"], "compatibility_key": key, "ranks": list(outcomes),
                          "outcomes": outcomes})  # fmt: skip
        return ledger_frame(self.rows), ReadMetadata(
            sources=(self.name,),
            warnings=tuple(self.warnings),
            lines=EvidenceLines(self.lines),
            boots=tuple(boots),
            provenance_parts=(provenance_part(self.provenance),),
        )


def _shared(rows: list[dict], column: str) -> object:
    """The value every row of a boot gives ``column`` (else NA)."""
    values = {row[column] for row in rows if column in row}
    return values.pop() if len(values) == 1 else pd.NA


def _value(column: str, cell: str, name: str, line: int) -> object:
    """One cell as the glossary types it."""
    text = cell.strip()
    where = f"{name}:{line}: column {column!r}"
    if column in BYTES_COLUMNS:
        try:
            return parse_size(text)
        except ValueError as exc:
            raise LedgerCsvError(f"{where}: {exc}") from None
    if column in INT_COLUMNS:
        try:
            whole: Decimal | None = Decimal(text)
        except InvalidOperation:
            whole = None
        if whole is None or not whole.is_finite() or whole != whole.to_integral_value():
            raise LedgerCsvError(f"{where}: not a whole number: {text!r}")
        if column in _COUNT_COLUMNS and whole < 0:
            raise LedgerCsvError(f"{where}: must not be negative, got {text!r}")
        if abs(whole) >= 1 << 63:  # a pandas int64 column cannot hold it ("int too large", issue 11 item 20)
            raise LedgerCsvError(f"{where}: {text[:40]!r} is beyond what a 64-bit ledger column holds")
        return int(whole)
    if column in FLOAT_COLUMNS:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise LedgerCsvError(f"{where}: not a number: {text!r}")
        return number
    if column in BOOL_COLUMNS:
        if text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise LedgerCsvError(f"{where}: not True or False: {text!r}")
    if column == "outcome" and text not in OUTCOMES:
        raise LedgerCsvError(f"{where}: {text!r} is not an outcome (one of {', '.join(OUTCOMES)})")
    if column == "room_source" and text not in ROOM_SOURCES:
        raise LedgerCsvError(f"{where}: {text!r} is not a room source (one of {', '.join(ROOM_SOURCES)})")
    return text
