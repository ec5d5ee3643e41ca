"""One host's reading: its ledger rows, warnings, compatibility key and room per rank, or why it is left out.

:func:`read_host` is the unit of work a Dask task runs. A host is read as ``kvplan budget`` and ``kvplan
approve`` read one launch: :func:`kvplan.plan.read_evidence` over its logs and nvidia-smi snapshots (the same
reader, the same join adding GPU type and driver to the key, each file named by its URL; files in object
storage are fetched to a temporary folder first, :func:`local_files`), then the pipeline's checks
(:func:`kvplan.room.check_dropped_ranks`, :func:`~kvplan.room.refuse_failed_boots`,
:func:`~kvplan.ledger.compatibility_key`, :func:`~kvplan.ledger.room_per_rank`). Every log must hold a vLLM
boot by its content (:func:`require_boot_per_file`). A host that fails any of these is *excluded* with the
reason, never folded into a class. Only ledger rows, each file's SHA-256 and the host's evidence identities
(:func:`evidence_identities`: one digest per boot, one entry per GPU UUID) travel back, never the log text.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import pandas as pd

from kvplan.fleet.inputs import LOG_SUFFIXES, HostFiles, filesystem
from kvplan.io.dcgm import read_gpu_snapshot
from kvplan.ledger import (
    LedgerWarning,
    compatibility_key,
    plain_value,
    room_per_rank,
)
from kvplan.notes import Note
from kvplan.plan import Evidence, InputFileError, read_evidence
from kvplan.plan.reading import STARTUP_LINES
from kvplan.room import check_dropped_ranks, refuse_failed_boots

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
    worst boot; ``excluded`` is the reason the host is left out (None: clean); ``digests`` each file's
    SHA-256 by URL (the bundle checks its copies against them); ``identities`` the host's evidence
    identities (:func:`evidence_identities`). Plain records, not a frame per host, keep what travels back
    from ten thousand tasks small.
    """

    host: str
    files: tuple[str, ...]
    labels: Mapping[str, str]
    key: Mapping[str, object] | None
    rooms: tuple[dict, ...] | None
    excluded: str | None
    warnings: tuple[Note, ...] = ()
    digests: Mapping[str, str] = field(default_factory=dict)
    identities: tuple[str, ...] = ()


def read_host(files: HostFiles, storage_options: Mapping[str, object] | None = None) -> HostReading:
    """Read and check one host (runs inside a Dask task); never raises for the host's own content."""
    names = (*files.logs, *files.snapshots)
    base = {"host": files.host, "files": names, "labels": dict(files.labels)}
    if files.missing:
        return HostReading(**base, key=None, rooms=None, excluded="; ".join(files.missing))
    if not files.logs:
        return HostReading(**base, key=None, rooms=None, excluded="no log files (expected <host>/*.log)")
    notes: list[Note] = []
    try:
        with local_files(names, storage_options) as local:
            logs, snapshots = local[: len(files.logs)], local[len(files.logs) :]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", LedgerWarning)
                evidence = read_evidence(logs, snapshots)
                notes += [w if isinstance(w, Note) else Note(w, file=files.host) for w in evidence.warnings]
                require_boot_per_file(evidence, files.logs)
                ledger, lines = evidence.ledger, evidence.lines
                key = compatibility_key(ledger, lines)
                check_dropped_ranks(evidence.warnings)
                refuse_failed_boots(ledger, lines)
                rooms = room_per_rank(ledger, lines=lines, key=key)
            digests, identities = evidence_identities(evidence, logs, snapshots)
        notes += [
            Note(str(w.message), code="ledger", file=files.host)
            for w in caught
            if issubclass(w.category, LedgerWarning)
        ]
    except FileNotFoundError as exc:
        return HostReading(**base, key=None, rooms=None, excluded=f"{exc.filename or exc}: no such file")
    except ValueError as exc:  # LedgerError, LogParseError, NvidiaSmiError: the host's evidence is refused
        return HostReading(**base, key=None, rooms=None, excluded=_short(str(exc)), warnings=tuple(notes))
    rooms_records = _with_parts(rooms, ledger)
    return HostReading(
        **base,
        key=key,
        rooms=rooms_records,
        excluded=None,
        warnings=tuple(notes),
        digests=digests,
        identities=identities,
    )


@contextmanager
def local_files(
    urls: Sequence[str], storage_options: Mapping[str, object] | None
) -> Iterator[list[tuple[str, str]]]:
    """``(local path, URL)`` of each file, for :func:`kvplan.plan.read_evidence`: a local file as it is
    (a symbolic link followed, as ``kvplan budget`` follows it), a remote one fetched to a temporary folder
    removed on exit (named by its position, keeping a ``.csv`` ledger's suffix).

    >>> with local_files(["data/fleet/small/gpu-00000/boot.log"], None) as found:
    ...     found
    [('data/fleet/small/gpu-00000/boot.log', 'data/fleet/small/gpu-00000/boot.log')]
    """
    folder = None
    try:
        pairs = []
        for number, url in enumerate(urls):
            if "://" not in url:
                pairs.append((url, url))
                continue
            folder = folder or tempfile.mkdtemp(prefix="kvplan-fleet-")
            fs, path = filesystem(url, storage_options)
            suffix = next((s for s in LOG_SUFFIXES if url.lower().endswith(s)), ".log")
            local = os.path.join(folder, f"{number}{suffix}")
            fs.get(path, local)
            pairs.append((local, url))
        yield pairs
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def require_boot_per_file(evidence: Evidence, logs: Sequence[str]) -> None:
    """Raise :class:`kvplan.plan.InputFileError` naming the first log that holds no vLLM boot: a row of the
    fleet names a vLLM log (or a ledger CSV) by its content, never any file."""
    shown = {str(boot["source"]) for boot in evidence.metadata.boots} if evidence.metadata else set()
    shown |= {str(source) for source in evidence.ledger["source"].unique()}
    for url in logs:
        if url not in shown:
            raise InputFileError(f"{url}: not a vLLM log (no vLLM boot found): expected {STARTUP_LINES}")


def evidence_identities(
    evidence: Evidence, logs: Sequence[tuple[str, str]], snapshots: Sequence[tuple[str, str]]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """Each file's SHA-256 by URL, and the host's evidence identities: ``boot:`` and the SHA-256 of each
    boot's lines (first to last, as read) and its ranks' pids; ``gpu:`` and each GPU UUID its snapshots show.

    The same boot, or the same GPU, under two hosts is one piece of evidence claimed twice
    (:func:`kvplan.fleet.planner.shared_evidence` refuses it).
    """
    pids: dict[tuple[str, int], list[int]] = {}
    ledger = evidence.ledger
    for source, boot, pid in zip(ledger["source"], ledger["boot"], ledger["pid"]):
        if not pd.isna(pid):
            pids.setdefault((str(source), int(boot)), []).append(int(pid))
    boots = evidence.metadata.boots if evidence.metadata else ()
    digests, identities = {}, []
    for path, url in logs:
        ranges = [(int(b["boot"]), b["first_line"], b["last_line"]) for b in boots if b["source"] == url]
        digests[url], boot_hashes = _hash_lines(path, ranges)
        for boot, boot_hash in boot_hashes.items():
            boot_hash.update(repr(sorted(pids.get((url, boot), []))).encode())
            identities.append("boot:" + boot_hash.hexdigest())
        if not ranges:  # a ledger CSV: the file is the boot
            identities.append("boot:" + digests[url])
    for path, url in snapshots:
        digests[url] = _hash_lines(path, [])[0]
        frame, metadata = read_gpu_snapshot(path)  # nvidia-smi's CSV or a DCGM scrape
        if metadata.kind == "gpus":
            identities += [f"gpu:{uuid}" for uuid in frame["gpu_uuid"].dropna().astype(str)]
    return digests, tuple(sorted(set(identities)))


def _hash_lines(path: str, ranges: Sequence[tuple[int, int | None, int | None]]) -> tuple[str, dict]:
    """The file's SHA-256 and, per boot of ``ranges`` ``(boot, first line, last line)``, a hash of its lines."""
    whole = hashlib.sha256()
    hashes = {boot: hashlib.sha256() for boot, _, _ in ranges}
    with open(path, "rb") as stream:
        for number, line in enumerate(stream, start=1):
            whole.update(line)
            for boot, first, last in ranges:
                if (first or 1) <= number and (last is None or number <= last):
                    hashes[boot].update(line)
    return whole.hexdigest(), hashes


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
