"""Read vLLM startup logs (releases 0.5 to 0.33) into the per-rank ledger: one row per boot × rank, bytes as
nullable ``Int64``, ``NA`` where the log does not say; every value keeps its file and line (``metadata``).
"""

from __future__ import annotations

import contextlib
import glob as globlib
import io
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO

import pandas as pd
from pandas.api.extensions import ExtensionArray

from kvplan.columns import KEY_COLUMNS, LEDGER_COLUMNS
from kvplan.io.ledger_csv import read_ledger_csv
from kvplan.io.ledger_frame import ImpossibleValue, ledger_columns
from kvplan.io.metadata import (
    EvidenceLines,
    RawLines,
    ReadMetadata,
    RoomRule,
    merge_metadata,
    place_note,
)
from kvplan.io.vllm.boots import Boot, BootSplitter
from kvplan.io.vllm.conflicts import TwoLaunches
from kvplan.io.vllm.resolve import resolve_boot
from kvplan.io.vllm.scan import Prepend, ScanStats, iter_candidate_lines


class LogParseError(ValueError):
    """Input that is not a text log at all; the message names the file and line."""


def read_vllm_log(
    path_or_text: str | os.PathLike | bytes | IO[bytes],
    source: str | None = None,
    room_rule: RoomRule | None = None,
) -> tuple[pd.DataFrame, ReadMetadata]:
    """``(ledger, metadata)`` of one vLLM log (a path, the log text itself, bytes or a binary stream); a
    ``.csv`` path is a ledger CSV (:func:`kvplan.io.ledger_csv.read_ledger_csv`). With ``room_rule``
    (:data:`kvplan.room.ROOM_RULE`) each rank's ``room_bytes`` and ``room_source`` are filled too.

    >>> text = ("INFO 07-15 10:21:33 [gpu_worker.py:227] Available KV cache memory: 12.5 GiB\\n"
    ...         "INFO 07-15 10:21:34 [kv_cache_utils.py:1] GPU KV cache size: 102,400 tokens\\n"
    ...         "INFO:     Application startup complete.\\n")
    >>> ledger, meta = read_vllm_log(text)
    >>> row = ledger.iloc[0]
    >>> int(row["rank"]), int(row["available_kv_bytes"]), int(row["kv_cache_tokens"]), row["outcome"]
    (0, 13421772800, 102400, 'ok')
    """
    if _is_path(path_or_text) and Path(path_or_text).suffix.lower() == ".csv":
        return read_ledger_csv(Path(path_or_text), source=source or str(path_or_text), room_rule=room_rule)
    rows = _LogRows(room_rule)
    _read_into(rows, path_or_text, source)
    return rows.frame(), rows.metadata()


def _is_path(path_or_text: object) -> bool:
    """Whether :func:`read_vllm_log`'s argument names a file (rather than holding the text)."""
    if isinstance(path_or_text, os.PathLike):
        return True
    if not isinstance(path_or_text, str) or "\n" in path_or_text or "\r" in path_or_text:
        return False
    return os.path.exists(path_or_text) or bool(re.fullmatch(r"\S+\.(log|txt|out|err)", path_or_text))


def read_vllm_logs(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    room_rule: RoomRule | None = None,
    names: Mapping[str, str] | None = None,
) -> tuple[pd.DataFrame, ReadMetadata]:
    """The ledgers of many logs as one, in file order: a list of paths, a folder (its ``*.log``), or a glob
    (a ``.csv`` is a ledger CSV); ``source`` is each path as given, or its name in ``names``.
    """
    frames, metas = zip(*_parts(paths, room_rule, names or {}))
    ledger = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return ledger, merge_metadata(metas)


def stream_vllm_logs(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    rows_to: Callable[[list[dict]], None],
    room_rule: RoomRule | None = None,
    names: Mapping[str, str] | None = None,
) -> ReadMetadata:
    """:func:`read_vllm_logs` for a caller that wants the rows only: they go to ``rows_to`` in batches
    (dicts in ledger column order) as boots are resolved; no frame is built, no provenance kept.

    >>> from kvplan import DATA_DIR
    >>> batches = []
    >>> meta = stream_vllm_logs([DATA_DIR / "boots" / "four-rank" / "boot.log"], batches.append)
    >>> [row["rank"] for batch in batches for row in batch], len(meta.boots), len(meta.provenance_rows)
    ([0, 1, 2, 3], 1, 0)
    """
    metas = []
    for frame, meta in _parts(paths, room_rule, names or {}, rows_to):
        if frame is not None:  # a ledger CSV's rows
            rows_to(frame.to_dict(orient="records"))
        metas.append(meta)
    return merge_metadata(metas)


def _parts(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    room_rule: RoomRule | None,
    names: Mapping[str, str],
    rows_to: Callable[[list[dict]], None] | None = None,
) -> Iterator[tuple[pd.DataFrame | None, ReadMetadata]]:
    """``(frame, metadata)`` parts in file order: one per ledger CSV, one per run of logs between them (its
    frame None when its rows went to ``rows_to``)."""
    files = _expand(paths)
    if not files:
        raise FileNotFoundError(f"no log files in {paths!r} (expected paths, a folder of *.log, or a glob)")
    rows: _LogRows | None = None
    for path in files:
        if path.lower().endswith(".csv"):
            if rows is not None:
                yield rows.frame(), rows.metadata(single=False)
                rows = None
            yield read_ledger_csv(Path(path), source=names.get(path, path), room_rule=room_rule)
            continue
        rows = rows if rows is not None else _LogRows(room_rule, rows_to)
        _read_into(rows, Path(path), names.get(path, path))
    if rows is not None:
        yield rows.frame(), rows.metadata(single=False)


def _expand(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    files: list[str] = []
    for item in items:
        text = str(item)
        if os.path.isdir(text):
            files.extend(sorted(str(p) for p in Path(text).glob("*.log")))
        elif any(char in text for char in "*?[") and not os.path.exists(text):
            files.extend(sorted(globlib.glob(text)))
        else:
            files.append(text)
    return files


#: Rows kept as dicts before they join the ledger as columns (columns hold a row in far less memory).
FRAME_ROWS = 4096


class _LogRows:
    """Rows, provenance, warnings and boots of the logs read so far (one or many files)."""

    def __init__(
        self, room_rule: RoomRule | None = None, rows_to: Callable[[list[dict]], None] | None = None
    ) -> None:
        self.room_rule = room_rule
        #: where rows go in batches instead of into frames (then no provenance is kept)
        self.rows_to = rows_to
        self.rows: list[dict] = []
        #: the rows already gathered into columns, FRAME_ROWS at a time (see ledger_columns)
        self.parts: list[dict[str, ExtensionArray]] = []
        self.provenance: list[tuple] = []
        self.warnings: list = []
        self.boots: list[dict] = []
        self.files: dict[str, tuple[object, bytes]] = {}
        self.sources: list[str] = []
        self.total_lines: int | None = None
        #: each distinct compatibility key once: the boots of one deployment share theirs
        self.keys: dict[tuple, dict] = {}

    def close(self, boot: Boot, source: str) -> None:
        """Resolve one finished boot into rows."""
        streaming = self.rows_to is not None
        resolved = resolve_boot(boot, source, self.room_rule, provenance=not streaming)
        self.rows.extend(resolved.rows)
        if len(self.rows) >= FRAME_ROWS:
            self._flush()
        if not streaming:
            self.provenance.extend(resolved.provenance)
        self.warnings.extend(resolved.warnings)
        info = resolved.info
        key = info["compatibility_key"]
        with contextlib.suppress(TypeError):  # a value that cannot be hashed: this boot keeps its own
            info["compatibility_key"] = self.keys.setdefault(tuple(key.items()), key)
        self.boots.append(info)

    def _flush(self) -> None:
        """The rows kept so far into columns (:func:`~kvplan.io.ledger_frame.ledger_columns`) or to ``rows_to``."""
        if self.rows_to is None:
            self.parts.append(ledger_columns(self.rows))
        else:
            self.rows_to(self.rows)
        self.rows = []

    def frame(self) -> pd.DataFrame | None:
        """The ledger of the rows read so far, once: each part's column is dropped once joined, so that the
        parts and the whole are never all in memory together. None when the rows went to ``rows_to``."""
        if self.rows_to is not None:
            self._flush()
            return None
        parts = [*self.parts, ledger_columns(self.rows)] if self.rows or not self.parts else self.parts
        self.parts, self.rows = [], []
        columns = {column: _joined([part.pop(column) for part in parts]) for column in LEDGER_COLUMNS}
        return pd.DataFrame(columns, columns=LEDGER_COLUMNS, copy=False)

    def metadata(self, single: bool = True) -> ReadMetadata:
        provenance, boots = self.provenance, tuple(self.boots)
        return ReadMetadata(
            sources=tuple(self.sources),
            warnings=tuple(self.warnings),
            lines=EvidenceLines(build=lambda: _evidence_lines(provenance, boots)),
            boots=boots,
            provenance_rows=provenance,
            raw_lines=RawLines(self.files),
            total_lines=self.total_lines if single else None,
        )


def _joined(arrays: list[ExtensionArray]) -> ExtensionArray:
    """One column's parts (arrays of one dtype) as one array, as ``pd.concat`` of them gives it."""
    if len(arrays) == 1:
        return arrays[0]
    return pd.concat([pd.Series(array, copy=False) for array in arrays], ignore_index=True).array


def _evidence_lines(provenance: list[tuple], boots: tuple[dict, ...]) -> Iterator[tuple[tuple, int]]:
    """The line index (:class:`~kvplan.io.metadata.EvidenceLines`): the line of each room, outcome and key
    value, and each boot's first line."""
    for source, line, boot, rank, column, _value, _raw in provenance:
        if column in ("room_bytes", "outcome") or column in KEY_COLUMNS:
            yield (source, boot, -1 if rank is pd.NA else rank, column), line
    for info in boots:
        yield (info["source"], info["boot"], -1, "boot"), info["first_line"]


def _read_into(
    rows: _LogRows, path_or_text: str | os.PathLike | bytes | IO[bytes], source: str | None
) -> None:
    """Read one log (path, text, bytes or binary stream) into ``rows``."""
    if isinstance(path_or_text, (bytes, bytearray)):
        data = bytes(path_or_text)
        _read_stream(rows, io.BytesIO(data), source or "<text>", data)
    elif hasattr(path_or_text, "read"):
        name = getattr(path_or_text, "name", None)
        where = name if isinstance(name, str) and os.path.isfile(name) else None
        _read_stream(rows, path_or_text, source or name or "<stream>", where)
    elif _is_path(path_or_text):
        with open(path_or_text, "rb") as stream:
            _read_stream(rows, stream, source or str(path_or_text), os.fspath(path_or_text))
    else:
        data = str(path_or_text).encode("utf-8")
        _read_stream(rows, io.BytesIO(data), source or "<text>", data)


def _read_stream(rows: _LogRows, stream: IO[bytes], source: str, where: object) -> None:
    """Scan one stream; ``where`` (its path or bytes, None when neither) is where raw lines are read
    back from: without it, provenance keeps each line's text."""
    stats = ScanStats()
    first = stream.read(8192)
    # CR-only line ends (classic Mac, `tr '\n' '\r'`): a first block with \r but no \n. Then every \r
    # ends a line, so that file:line counts as an editor would; elsewhere \r stays a progress update.
    cr_only = b"\r" in first and b"\n" not in first
    end = b"\r" if cr_only else b"\n"
    if b"\x00" in first:
        line = first[: first.index(b"\x00")].count(end) + 1
        raise LogParseError(f"{source}: line {line}: NUL byte: not a text log (compressed or binary?)")
    splitter = BootSplitter(source, lambda boot: rows.close(boot, source))
    try:
        for number, offset, data in iter_candidate_lines(Prepend(first, stream, cr_only), stats):
            splitter.line(number, offset if where is not None else None, data)
        if stats.ended_mid_line:
            cut = "the file ends mid-line (the log was cut off)"
            rows.warnings.append(place_note("cut-mid-line", source, stats.lines, cut))
        splitter.finish()
    except (ImpossibleValue, TwoLaunches) as exc:  # a log no single vLLM launch can print: refused
        raise LogParseError(str(exc)) from None
    if where is not None:
        rows.files[source] = (where, end)
    rows.sources.append(source)
    rows.total_lines = stats.lines
