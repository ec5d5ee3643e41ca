"""The evidence a decision is made from: the ledger of the logs (named as the caller quotes them: a bundle's
``inputs/boot.log``), its provenance, the reader's notes, the load runs; or rooms given by hand."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
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
    metadata: ReadMetadata | None = None  # the provenance frame is built from it only when asked for
    warnings: tuple[str, ...] = ()
    rooms: tuple[int, ...] | None = None
    lines: Mapping = field(default_factory=dict)  # the readers' line index (``ReadMetadata.lines``)
    loads: Sequence[tuple[Path, str]] = ()
    gpus: pd.DataFrame | None = None  # the ``--query-gpu`` snapshot joined (one row per GPU)
    free_bytes: Mapping[int, int] | None = None  # each rank's free memory in it

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
    ``snapshots`` of the same boot, with the ``loads`` runs; no boot at all is refused."""
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
    if snapshots:  # joined, each error and warning naming the snapshot by its name
        given = [(Path(i[0]), i[1]) if isinstance(i, tuple) else (Path(i), str(i)) for i in snapshots]
        quoted = {str(path): name for path, name in given}
        try:
            gpus, apps = read_nvidia_smi_snapshots([path for path, _ in given])
            ledger, free, joined = join_gpu_frames(ledger, gpus, apps, warn=False)
        except NvidiaSmiError as exc:
            raise NvidiaSmiError(renamed(str(exc), quoted)) from exc
        warnings += [renamed(warning, quoted) for warning in joined.warnings]
    evidence = Evidence(ledger, metadata, tuple(warnings), lines=metadata.lines, loads=tuple(loads))
    return replace(evidence, gpus=gpus, free_bytes=free)


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


def require_boot(ledger: pd.DataFrame, names: Sequence[str]) -> None:
    """Raise :class:`InputFileError` naming the files when their ledger holds no boot."""
    if ledger.empty:
        raise InputFileError(f"{', '.join(map(str, names))}: no vLLM boot found: expected {STARTUP_LINES}")


def require_files(paths: Sequence[str | os.PathLike], argument: str) -> None:
    """Raise :class:`InputFileError` naming the first path that is not a readable file, and its argument."""
    for path in paths:
        if not Path(path).is_file():
            what = "a folder, not a file" if Path(path).is_dir() else "no such file"
            raise InputFileError(f"{path}: {what} ({argument})")


def renamed(text: str, names: Mapping[str, str]) -> str:
    """``text`` with every key of ``names`` replaced by its value in one pass, longest key first."""
    if not names:
        return text
    pattern = "|".join(re.escape(old) for old in sorted(names, key=len, reverse=True))
    return re.sub(pattern, lambda match: names[match.group(0)], text)
