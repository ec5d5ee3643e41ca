"""One host's reading: its ledger rows, warnings, compatibility key and room per rank, or why it is left out.

:func:`read_host` is the unit of work a Dask task runs: it streams the host's logs through
:func:`kvplan.room.read_vllm_log`, joins its nvidia-smi snapshots (:func:`kvplan.io.nvidia_smi.join_snapshots`,
which adds GPU type and driver to the key), and checks it as a launch of its own
(:func:`kvplan.ledger_budget.refuse_failed_boots`, :func:`~kvplan.ledger.compatibility_key`,
:func:`~kvplan.ledger.room_per_rank`). A host that fails any of these is *excluded* with the reason, never
folded into a class. Only ledger rows travel back, never the log text.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from kvplan.fleet.inputs import HostFiles, filesystem
from kvplan.io.nvidia_smi import join_snapshots
from kvplan.ledger import (
    LedgerWarning,
    compatibility_key,
    plain_value,
    room_per_rank,
)
from kvplan.ledger_budget import check_dropped_ranks, refuse_failed_boots
from kvplan.notes import Note
from kvplan.room import read_vllm_log

#: Ledger columns a host's reading keeps per rank of its worst boot (for the likely cause of a weak host).
PART_COLUMNS = (
    "init_free_bytes",
    "weights_bytes",
    "activation_peak_bytes",
    "non_torch_bytes",
    "cuda_graph_bytes",
    "other_process_bytes",
    "total_bytes",
)
#: How many characters of a refusal an excluded host's reason keeps.
REASON_CHARS = 400


@dataclass(frozen=True)
class HostReading:
    """What one host's files say (sizes in bytes).

    ``rooms`` holds one plain record per rank: :func:`kvplan.ledger.room_per_rank` of the host (``rank``,
    ``room_bytes``, ``room_source``, ``source``, ``boot``, ...) with the :data:`PART_COLUMNS` of the rank's
    worst
    boot; ``excluded`` is the reason the host is left out (None: clean). Plain records, not a frame per host,
    keep what travels back from ten thousand tasks small.
    """

    host: str
    files: tuple[str, ...]
    labels: Mapping[str, str]
    key: Mapping[str, object] | None
    rooms: tuple[dict, ...] | None
    excluded: str | None
    warnings: tuple[Note, ...] = ()


def read_host(files: HostFiles, storage_options: Mapping[str, object] | None = None) -> HostReading:
    """Read and check one host (runs inside a Dask task); never raises for the host's own content."""
    names = (*files.logs, *files.snapshots)
    base = {"host": files.host, "files": names, "labels": dict(files.labels)}
    if files.missing:
        listing = "; ".join(f"manifest line {line}: {path}: no such file" for line, path in files.missing)
        return HostReading(**base, key=None, rooms=None, excluded=listing)
    if not files.logs:
        return HostReading(**base, key=None, rooms=None, excluded="no log files (expected <host>/*.log)")
    notes: list[Note] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", LedgerWarning)
            ledger, lines = read_logs(files.logs, storage_options, notes)
            if ledger.empty:
                reason = f"no vLLM boot found in {', '.join(files.logs)}"
                return HostReading(**base, key=None, rooms=None, excluded=reason, warnings=tuple(notes))
            if files.snapshots:
                ledger, _ = join_host_snapshots(ledger, files.snapshots, storage_options, notes)
            key = compatibility_key(ledger, lines)
            check_dropped_ranks(notes)
            refuse_failed_boots(ledger, lines)
            rooms = room_per_rank(ledger, lines=lines, key=key)
        notes += [
            Note(str(w.message), code="ledger", file=files.host)
            for w in caught
            if issubclass(w.category, LedgerWarning)
        ]
    except FileNotFoundError as exc:
        return HostReading(**base, key=None, rooms=None, excluded=f"{exc.filename or exc}: no such file")
    except ValueError as exc:  # LedgerError, LogParseError, NvidiaSmiError: the host's evidence is refused
        return HostReading(**base, key=None, rooms=None, excluded=_short(str(exc)), warnings=tuple(notes))
    return HostReading(
        **base, key=key, rooms=_with_parts(rooms, ledger), excluded=None, warnings=tuple(notes)
    )


def read_logs(urls, storage_options, notes: list[Note]) -> tuple[pd.DataFrame, dict]:
    """The host's logs, each streamed from its URL (local or object storage), concatenated, and the
    readers' line index (``ReadMetadata.lines``) that refusals quote; the readers' warnings are appended
    to ``notes`` as they come (:class:`~kvplan.notes.Note` s with code, file and line, for aggregation)."""
    frames, lines = [], {}
    for url in urls:
        fs, path = filesystem(url, storage_options)
        with fs.open(path, "rb") as stream:
            ledger, metadata = read_vllm_log(stream, source=url)
        notes += metadata.warnings
        lines.update(metadata.lines)
        frames.append(ledger)
    return (pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]), lines


def join_host_snapshots(
    ledger: pd.DataFrame, urls, storage_options, notes: list[Note]
) -> tuple[pd.DataFrame, dict]:
    """The ledger joined with the host's snapshots (fetched to a temporary folder when remote), and each
    rank's free memory in them [bytes] (:func:`kvplan.io.nvidia_smi.join_snapshots`)."""
    folder = None
    try:
        paths = []
        for url in urls:
            if "://" not in url:
                paths.append(url)
                continue
            folder = folder or tempfile.mkdtemp(prefix="kvplan-fleet-")
            fs, path = filesystem(url, storage_options)
            local = os.path.join(folder, path.rsplit("/", 1)[-1])
            fs.get(path, local)
            paths.append(local)
        joined, free, joined_metadata = join_snapshots(ledger, paths, warn=False)
        notes += list(joined_metadata.warnings)
        return joined, free
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def _with_parts(rooms: pd.DataFrame, ledger: pd.DataFrame) -> tuple[dict, ...]:
    """One plain record per rank: its room and the ledger parts of its worst boot (plain lists, no
    pandas per rank: this runs once per host of the fleet)."""
    where = zip(*(ledger[name].tolist() for name in ("source", "boot", "rank")))
    first: dict[tuple, int] = {}
    for position, place in enumerate(where):
        first.setdefault(tuple(plain_value(value) for value in place), position)
    parts = {column: ledger[column].tolist() for column in PART_COLUMNS if column in ledger.columns}
    records = []
    for rank, room in zip(rooms.index.tolist(), rooms.to_dict("records")):
        record = {"rank": int(rank), **{name: plain_value(value) for name, value in room.items()}}
        position = first.get((record["source"], record["boot"], int(rank)))
        for column in PART_COLUMNS:
            found = position is not None and column in parts
            record[column] = plain_value(parts[column][position]) if found else None
        records.append(record)
    return tuple(records)


def _short(text: str) -> str:
    """A refusal cut to its first item and :data:`REASON_CHARS` characters, with the count of the rest.

    >>> _short("a.log:3: rank 0 oom; a.log:4: rank 1 oom")
    'a.log:3: rank 0 oom (+1 more)'
    """
    items = text.split("; ")
    first = items[0] if len(items[0]) <= REASON_CHARS else items[0][: REASON_CHARS - 1] + "…"
    return first + (f" (+{len(items) - 1} more)" if len(items) > 1 else "")
