"""The evidence a decision is made from: the ledger of the logs (named as the caller quotes them: a bundle's
``inputs/boot.log``), its provenance, the reader's notes, the load runs; or rooms given by hand."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pandas as pd

from kvplan.checks.key import read_defaulted_key_fields
from kvplan.io.metadata import ReadMetadata, merge_metadata
from kvplan.io.nvidia_smi import NvidiaSmiError, join_gpu_frames, read_nvidia_smi_snapshots
from kvplan.room import read_vllm_logs_rooms

STARTUP_LINES = (
    "vLLM startup lines such as 'Free memory on device (…) on startup', 'Available KV cache "
    "memory: … GiB' or 'GPU KV cache size: N tokens'"
)


class InputFileError(ValueError):
    """An input file that is missing or holds nothing kvplan can read; the message names it."""


@dataclass(frozen=True)
class Evidence:
    """What the pipeline decides from: the ledger (one row per boot × rank, bytes), the reader's metadata and
    warnings, or ``rooms`` given by hand (then ``ledger`` is empty); ``loads``: ``(path, name)`` of load-test
    runs at the approved value, read and judged by :func:`kvplan.plan.decide` with its load policy."""

    ledger: pd.DataFrame
    #: the reader's metadata: the provenance frame is built from it only when asked for
    metadata: ReadMetadata | None = None
    warnings: tuple[str, ...] = ()
    rooms: tuple[int, ...] | None = None
    #: the readers' line index (:attr:`kvplan.io.metadata.ReadMetadata.lines`) refusals quote
    lines: Mapping = field(default_factory=dict)
    loads: Sequence[tuple[Path, str]] = ()
    #: the ``--query-gpu`` snapshot joined (one row per GPU; None without one) and each rank's free memory in it
    gpus: pd.DataFrame | None = None
    free_bytes: Mapping[int, int] | None = None

    @property
    def provenance(self) -> pd.DataFrame:
        """One row per value read (source, line, boot, rank, column, value, raw line), built on first use."""
        return self.metadata.provenance if self.metadata is not None else pd.DataFrame()

    @property
    def defaulted_key_fields(self) -> frozenset[str]:
        """Key fields the reader filled with vLLM's default."""
        return read_defaulted_key_fields(self.metadata) if self.metadata is not None else frozenset()


def given_rooms(room_bytes: Sequence[int]) -> Evidence:
    """Evidence of rooms typed in by hand, rank order [bytes]."""
    return Evidence(ledger=pd.DataFrame(), rooms=tuple(int(room) for room in room_bytes))


def read_evidence(
    logs: str | os.PathLike | Sequence[str | os.PathLike | tuple[str | os.PathLike, str]],
    snapshots: Sequence[str | os.PathLike | tuple[str | os.PathLike, str]] = (),
    loads: Sequence[tuple[Path, str]] = (),
) -> Evidence:
    """The evidence of vLLM logs (paths, a folder, a glob, or ``(path, name)`` pairs) joined with the nvidia-smi
    ``snapshots`` of the same boot, with the ``loads`` runs; no boot at all is refused.

    >>> from kvplan import DATA_DIR
    >>> evidence = read_evidence([DATA_DIR / "boots" / "four-rank" / "boot.log"])
    >>> sorted(evidence.ledger["rank"].tolist())
    [0, 1, 2, 3]
    """
    if isinstance(logs, (str, os.PathLike)) or not all(isinstance(item, tuple) for item in logs):
        ledger, metadata = read_vllm_logs_rooms(cast("str | os.PathLike | Sequence[str | os.PathLike]", logs))
        names = list(metadata.sources)
    else:
        pairs = cast("Sequence[tuple[str | os.PathLike, str]]", logs)
        ledger, metadata = _read_named(pairs)
        names = [name for _, name in pairs]
    warnings: list[str] = list(metadata.warnings)
    require_boot(ledger, names)
    gpus, free = None, None
    if snapshots:
        ledger, joined, gpus, free = _join_named(ledger, [_pair(item) for item in snapshots])
        warnings += joined
    return Evidence(
        ledger,
        metadata,
        tuple(warnings),
        lines=metadata.lines,
        loads=tuple(loads),
        gpus=gpus,
        free_bytes=free,
    )


def _pair(item: str | os.PathLike | tuple[str | os.PathLike, str]) -> tuple[Path, str]:
    return (Path(item[0]), item[1]) if isinstance(item, tuple) else (Path(item), str(item))


def _read_named(logs: Sequence[tuple[str | os.PathLike, str]]) -> tuple[pd.DataFrame, ReadMetadata]:
    """The logs read as one ledger (one frame however many files), each file with its own name."""
    if not logs:
        raise InputFileError("no log files: a decision needs the logs of at least one profiled boot")
    paths = [str(path) for path, _ in logs]
    if len(set(paths)) < len(paths):  # one file under two names: read it once per name
        parts = [read_vllm_logs_rooms([path], names={path: name}) for path, (_, name) in zip(paths, logs)]
        ledger = pd.concat([frame for frame, _ in parts], ignore_index=True)
        metadata = merge_metadata([meta for _, meta in parts])
    else:
        ledger, metadata = read_vllm_logs_rooms(
            paths, names={path: name for path, (_, name) in zip(paths, logs)}
        )
    return ledger, metadata


def _join_named(ledger: pd.DataFrame, snapshots: Sequence[tuple[Path, str]]) -> tuple:
    """The ledger joined with the snapshots, the join's warnings (each naming the snapshot's name), the GPUs
    and each rank's free memory [bytes]."""
    names = {str(path): name for path, name in snapshots}
    try:
        gpus, apps = read_nvidia_smi_snapshots([path for path, _ in snapshots])
        joined, free, joined_metadata = join_gpu_frames(ledger, gpus, apps, warn=False)
    except NvidiaSmiError as exc:
        raise NvidiaSmiError(renamed(str(exc), names)) from exc
    return joined, [renamed(warning, names) for warning in joined_metadata.warnings], gpus, free


def require_boot(ledger: pd.DataFrame, names: Sequence[str]) -> None:
    """Raise :class:`InputFileError` naming the files when their ledger holds no boot.

    >>> require_boot(pd.DataFrame(), ["garbage.log"])
    Traceback (most recent call last):
    ...
    kvplan.plan.reading.InputFileError: garbage.log: no vLLM boot found: expected vLLM startup lines such \
as 'Free memory on device (…) on startup', 'Available KV cache memory: … GiB' or 'GPU KV cache size: N tokens'
    """
    if ledger.empty:
        raise InputFileError(f"{', '.join(map(str, names))}: no vLLM boot found: expected {STARTUP_LINES}")


def require_files(paths: Sequence[str | os.PathLike], argument: str) -> None:
    """Raise :class:`InputFileError` naming the first path that is not a readable file, and its argument.

    >>> require_files(["no/such.log"], "BOOT_LOG")
    Traceback (most recent call last):
    ...
    kvplan.plan.reading.InputFileError: no/such.log: no such file (BOOT_LOG)
    """
    for path in paths:
        if not Path(path).is_file():
            what = "a folder, not a file" if Path(path).is_dir() else "no such file"
            raise InputFileError(f"{path}: {what} ({argument})")


def renamed(text: str, names: Mapping[str, str]) -> str:
    """``text`` with every key of ``names`` replaced by its value in one pass, longest key first.

    >>> renamed("inputs/a.log.1: bad; inputs/a.log: ok", {"inputs/a.log": "x", "inputs/a.log.1": "y"})
    'y: bad; x: ok'
    """
    if not names:
        return text
    pattern = "|".join(re.escape(old) for old in sorted(names, key=len, reverse=True))
    return re.sub(pattern, lambda match: names[match.group(0)], text)
