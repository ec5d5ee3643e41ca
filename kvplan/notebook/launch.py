"""A launch for a notebook: its logs and the nvidia-smi snapshots beside them, its spec and length."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from kvplan import PROJECT_DIR
from kvplan.budget import Budget
from kvplan.columns import MEASUREMENTS
from kvplan.io import ReadMetadata
from kvplan.io.nvidia_smi import join_snapshots
from kvplan.ledger import compatibility_key
from kvplan.plan import Evidence, Policy, decide
from kvplan.room import read_vllm_logs_rooms

if TYPE_CHECKING:
    pass


def budgets_by_boot(
    ledger: pd.DataFrame, reserve_bytes: int, block_bytes: int | None = None, assume_uniform: bool = False
) -> dict[str, Budget]:
    """The budget each boot of a ledger gives on its own, keyed ``"<file> #<boot>"``."""
    budgets = {}
    for (source, boot), rows in ledger.groupby(["source", "boot"], sort=False):
        label = f"{Path(str(source)).name} #{int(boot)}"
        policy = Policy(reserve_bytes, assume_uniform=assume_uniform)
        budgets[label] = decide(Evidence(rows), policy, block_bytes=block_bytes).budget
    return budgets


def co_tenant_bytes(ledger: pd.DataFrame, ranks: Sequence[int] | None = None) -> list[int | None]:
    """Per rank, the most memory [bytes] other processes held on its GPU in any boot (None: no snapshot)."""
    wanted = sorted({int(rank) for rank in ledger["rank"].dropna()}) if ranks is None else list(ranks)
    if "other_process_bytes" not in ledger.columns:
        return [None] * len(wanted)
    most = ledger.groupby("rank")["other_process_bytes"].max()
    return [None if rank not in most.index or pd.isna(most[rank]) else int(most[rank]) for rank in wanted]


#: The nvidia-smi snapshots :func:`read_launch` looks for beside the logs (the README's commands).
NVIDIA_SMI_NAMES = ("nvidia-smi-gpu.csv", "nvidia-smi-apps.csv")


def snapshots_in(folder: str | Path) -> list[Path]:
    """The :data:`NVIDIA_SMI_NAMES` snapshots saved in ``folder``."""
    folder = Path(folder)
    return [folder / name for name in NVIDIA_SMI_NAMES if (folder / name).is_file()]


def launch_snapshots(
    log_paths: Sequence[str | Path], nvidia_smi: Sequence[str | Path] | None = None
) -> list[Path]:
    """A launch's nvidia-smi snapshots: ``nvidia_smi`` when given (``[]``: none), else those beside its logs."""
    if nvidia_smi is not None:
        return [Path(path) for path in nvidia_smi]
    folders = dict.fromkeys(Path(path).parent for path in log_paths)
    return [path for folder in folders for path in snapshots_in(folder)]


class ParameterError(ValueError):
    """A notebook parameter that names nothing: shown as one ``error:`` line, no traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of the traceback
        return [f"error: {self}"]


def parameter_path(value: str | os.PathLike, name: str, root: Path = PROJECT_DIR) -> Path:
    """A notebook parameter's path: as given when it exists (or a glob matches), else from ``root`` (the
    checkout), else a :class:`ParameterError` naming both places."""
    path = Path(value)
    candidates = [path] if path.is_absolute() else [path, root / path]
    for candidate in candidates:
        if candidate.exists() or (glob.has_magic(str(candidate)) and glob.glob(str(candidate))):
            return candidate
    if path.is_absolute():
        raise ParameterError(f"{name} = {str(value)!r} names nothing: no such file or folder")
    raise ParameterError(
        f"{name} = {str(value)!r} names nothing: not found from the notebook's folder ({Path.cwd() / path}) "
        f"nor from the repository root ({root / path})"
    )


#: What a folder given as a log parameter stands for: its vLLM logs, as ``kvplan budget FOLDER`` reads it.
LOG_PATTERNS = ("*.log",)
#: What a folder given as a load-test run stands for: its server logs and /metrics snapshots, sub-folders too.
LOAD_PATTERNS = ("**/*.log", "**/*.prom")


def parameter_files(
    value: str | os.PathLike | Sequence[str | os.PathLike],
    name: str,
    patterns: Sequence[str] = LOG_PATTERNS,
    root: Path = PROJECT_DIR,
) -> list[Path]:
    """The files a notebook parameter names: a path, a glob, a folder (its ``patterns`` files) or a list of
    them, each by :func:`parameter_path`; nothing found is a :class:`ParameterError`.

    >>> from kvplan import DATA_DIR
    >>> [path.name for path in parameter_files("boots/four-rank", "LOG_DIR", root=DATA_DIR)]
    ['boot.log']
    >>> [path.name for path in parameter_files(["boots/drift/*.log"], "LOG_FILES", root=DATA_DIR)]
    ['canary.log', 'reference.log']
    """
    values = [value] if isinstance(value, (str, os.PathLike)) else list(value)
    if not values:
        raise ParameterError(f"{name} is empty: give a file, a folder, a glob or a list of them")
    files: list[Path] = []
    for item in values:
        path = parameter_path(item, name, root)
        if path.is_dir():
            found = sorted({match for pattern in patterns for match in path.glob(pattern) if match.is_file()})
            if not found:
                raise ParameterError(
                    f"{name} = {str(item)!r}: the folder {path} holds no {' or '.join(patterns)} file"
                )
        elif not path.exists():  # a glob that matches (parameter_path checked)
            found = sorted(Path(match) for match in glob.glob(str(path)))
        else:
            found = [path]
        files += found
    return list(dict.fromkeys(files))


def parameter_model(value: str | os.PathLike, root: Path = PROJECT_DIR) -> str | os.PathLike:
    """A notebook's ``MODEL``: a catalogue name as given, or a config.json path as :func:`parameter_path`'s."""
    path = Path(value)
    if not path.is_absolute() and not path.exists() and (root / path).is_file():
        return root / path
    return value


def run_folder(prefix: str, root: Path = PROJECT_DIR) -> Path:
    """A new empty folder ``<root>/build/<prefix>-XXXXXXXX`` for one run's files."""
    import tempfile

    (root / "build").mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=root / "build"))


def read_launch(
    logs: str | os.PathLike | Sequence[str | os.PathLike],
    nvidia_smi: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    name: str = "LOG_DIR",
) -> tuple[pd.DataFrame, ReadMetadata]:
    """The ledger and metadata of a launch's logs (parameter ``name``), with the nvidia-smi snapshots beside
    them joined (``nvidia_smi``: others; ``[]``: none)."""
    files = parameter_files(logs, name)
    ledger, metadata = read_vllm_logs_rooms(files)
    if nvidia_smi is None:
        snapshots = launch_snapshots(files)
    else:
        snapshots = parameter_files(nvidia_smi, "NVIDIA_SMI", NVIDIA_SMI_NAMES) if nvidia_smi else []
    if snapshots:
        ledger, _, joined = join_snapshots(ledger, snapshots, warn=False)  # its warnings listed below
        metadata = metadata.with_warnings(joined.warnings)
    return ledger, metadata


def launch_max_model_len(ledger: pd.DataFrame, given: int | None = None) -> int:
    """The maximum model length [tokens] to plan with: ``given``, else the launch's."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given <= 0:
            raise ValueError(f"MAX_MODEL_LEN must be a positive whole number of tokens, got {given!r}")
        return given
    logged = compatibility_key(ledger).get("max_model_len")
    if logged is None or pd.isna(logged):
        raise ValueError("the logs show no max_model_len: set MAX_MODEL_LEN to the length the launch used")
    return int(logged)


def coverage(ledger: pd.DataFrame) -> pd.DataFrame:
    """Which measurements each boot × rank printed: a row per measurement, a column per (source,) boot, rank."""
    index = ["boot", "rank"]
    if "source" in ledger.columns and ledger["source"].nunique() > 1:
        index = ["source", *index]
    shown = ledger.set_index(index).reindex(columns=list(MEASUREMENTS))
    return shown.notna().T


def rows_that_set_the_room(ledger: pd.DataFrame) -> pd.DataFrame:
    """The ledger rows of each rank that show its room (all its rows where none does)."""
    if "room_bytes" not in ledger.columns:
        return ledger
    shown = ledger["room_bytes"].notna()
    any_shown = shown.groupby(ledger["rank"]).transform("any")
    return ledger[shown | ~any_shown]
