"""vLLM startup logs (0.5 to 0.33) into the ledger: a row per boot × rank, ``NA`` where the log does not say."""

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
    provenance_part,
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
    """``(ledger, metadata)`` of one vLLM log (path, text, bytes or binary stream; a ``.csv`` path is a ledger
    CSV); with ``room_rule`` (:data:`kvplan.room.ROOM_RULE`) each rank's room is filled too.

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
    """Whether :func:`read_vllm_log`'s argument names a file (not the text)."""
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
    """The ledgers of many logs (paths, a folder's ``*.log`` or a glob) as one, in file order; ``source`` is
    each path as given, or its name in ``names``."""
    frames, metas = zip(*_parts(paths, room_rule, names or {}))
    ledger = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return ledger, merge_metadata(metas)


def stream_vllm_logs(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    rows_to: Callable[[list[dict]], None],
    room_rule: RoomRule | None = None,
    names: Mapping[str, str] | None = None,
) -> ReadMetadata:
    """:func:`read_vllm_logs` rows only: to ``rows_to`` in batches of dicts; no frame, no provenance.

    >>> from kvplan import DATA_DIR
    >>> batches = []
    >>> meta = stream_vllm_logs([DATA_DIR / "boots" / "four-rank" / "boot.log"], batches.append)
    >>> [row["rank"] for batch in batches for row in batch], len(meta.boots), sum(map(len, meta.provenance_parts))
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
    """``(frame, metadata)`` in file order: one per ledger CSV, one per run of logs (frame None with ``rows_to``)."""
    files: list[str] = []
    for item in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        text = str(item)
        if os.path.isdir(text):
            files.extend(sorted(str(p) for p in Path(text).glob("*.log")))
        elif any(char in text for char in "*?[") and not os.path.exists(text):
            files.extend(sorted(globlib.glob(text)))
        else:
            files.append(text)
    if not files:
        raise FileNotFoundError(f"no log files in {paths!r} (expected paths, a folder of *.log, or a glob)")
    rows: _LogRows | None = None
    for path in files:
        if path.lower().endswith(".csv"):
            if rows is not None:
                yield rows.frame(), rows.metadata()
                rows = None
            yield read_ledger_csv(Path(path), source=names.get(path, path), room_rule=room_rule)
            continue
        rows = rows if rows is not None else _LogRows(room_rule, rows_to)
        _read_into(rows, Path(path), names.get(path, path))
    if rows is not None:
        yield rows.frame(), rows.metadata()


#: Rows kept as dicts before they join the ledger as columns (far less memory a row).
FRAME_ROWS = 4096


class _LogRows:
    """Rows, provenance, warnings and boots of the logs read so far."""

    def __init__(
        self, room_rule: RoomRule | None = None, rows_to: Callable[[list[dict]], None] | None = None
    ) -> None:
        self.room_rule, self.rows_to = room_rule, rows_to
        self.rows: list[dict] = []
        self.parts: list[dict[str, ExtensionArray]] = []  # rows gathered into columns, FRAME_ROWS at a time
        self.provenance: list[tuple] = []  # into a frame FRAME_ROWS at a time
        self.provenance_parts: list[pd.DataFrame] = []
        self.warnings: list = []
        self.boots: list[dict] = []
        self.files: dict[str, tuple[object, bytes]] = {}
        self.sources: list[str] = []
        #: each distinct compatibility key once: the boots of one deployment share theirs
        self.keys: dict[tuple, dict] = {}

    def close(self, boot: Boot, source: str) -> None:
        """Resolve one finished boot into rows."""
        keep = self.rows_to is None  # provenance, unless the rows stream on
        rows, provenance, warnings, info = resolve_boot(boot, source, self.room_rule, provenance=keep)
        self.rows.extend(rows)
        if len(self.rows) >= FRAME_ROWS:
            self._flush()
        self.provenance.extend(provenance)
        if len(self.provenance) >= FRAME_ROWS:
            self.provenance_parts.append(provenance_part(self.provenance))
            self.provenance = []
        self.warnings.extend(warnings)
        key = info["compatibility_key"]
        with contextlib.suppress(TypeError):  # a value that cannot be hashed: this boot keeps its own
            info["compatibility_key"] = self.keys.setdefault(tuple(key.items()), key)
        self.boots.append(info)

    def _flush(self) -> None:
        """The rows kept so far into columns, or to ``rows_to``."""
        if self.rows_to is None:
            self.parts.append(ledger_columns(self.rows))
        else:
            self.rows_to(self.rows)
        self.rows = []

    def frame(self) -> pd.DataFrame | None:
        """The ledger of the rows read so far, once (None with ``rows_to``); each part's column goes once joined."""
        if self.rows_to is not None:
            self._flush()
            return None
        parts = [*self.parts, ledger_columns(self.rows)] if self.rows or not self.parts else self.parts
        self.parts, self.rows = [], []
        columns = {}
        for column in LEDGER_COLUMNS:
            arrays = [part.pop(column) for part in parts]
            series = (pd.Series(array, copy=False) for array in arrays)
            columns[column] = arrays[0] if len(arrays) == 1 else pd.concat(series, ignore_index=True).array
        return pd.DataFrame(columns, columns=LEDGER_COLUMNS, copy=False)

    def metadata(self) -> ReadMetadata:
        provenance, boots = (*self.provenance_parts, provenance_part(self.provenance)), tuple(self.boots)
        return ReadMetadata(
            sources=tuple(self.sources),
            warnings=tuple(self.warnings),
            lines=EvidenceLines(build=lambda: _evidence_lines(provenance, boots)),
            boots=boots,
            provenance_parts=provenance,
            raw_lines=RawLines(self.files),
        )


def _evidence_lines(parts: tuple[pd.DataFrame, ...], boots: tuple[dict, ...]) -> Iterator[tuple[tuple, int]]:
    """The line index (:class:`~kvplan.io.metadata.EvidenceLines`) of each room, outcome, key value and boot."""
    for part in parts:
        kept = part[part["column"].isin(["room_bytes", "outcome", *KEY_COLUMNS])]
        places = (kept[name].tolist() for name in ("source", "boot", "rank", "column", "line"))
        for source, boot, rank, column, line in zip(*places):
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
    """Scan one stream; ``where`` (path or bytes) is where raw lines are read back from (None: kept as text)."""
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
