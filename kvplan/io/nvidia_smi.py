"""Join what GPU snapshots say about each GPU to the ledger: a rank's GPU by its pid, else by its rank; a snapshot
of another machine (a ``memory.total`` that does not fit the logged total, fewer GPUs than ranks) is refused."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from kvplan.io.gpu_snapshot import NvidiaSmiError, read_gpu_snapshot, read_nvidia_smi_csv  # noqa: F401  (the doctests read snapshots)
from kvplan.io.metadata import ReadMetadata
from kvplan.notes import Note
from kvplan.units import GiB, MiB, format_size

CONTEXT_COLUMNS = ["gpu_index", "gpu_uuid", "gpu_name", "driver_version", "other_process_bytes"]
JOINED_COLUMNS = ["gpu_name", "driver_version", "other_process_bytes"]
#: What the checks of a ledger row and of a snapshot's GPU read.
ROW_CHECKED = ("source", "rank", "pid", "total_bytes")
GPU_CHECKED = ("gpu_index", "memory_total_bytes", "source", "line")

# Rounding between one GPU's totals: vLLM logs 2 decimals of GiB (±5.1 MiB), nvidia-smi whole MiB.
TOTAL_ROUNDING_BYTES = GiB // 200 + MiB


def driver_reserved_max_bytes(smi_total_bytes: int) -> int:
    """The most a GPU's driver reservation may take from nvidia-smi's ``memory.total`` [bytes]."""
    # The reservation is in memory.total, not in vLLM's (H100: 468 MiB, RTX PRO 6000: 638 MiB): up to the larger
    # of 1 GiB and 3 % passes, while models of one family differ by far more (H100 80 vs 94 GB: 14 GiB).
    return max(GiB, int(0.03 * smi_total_bytes))


class NvidiaSmiWarning(UserWarning):
    """A snapshot joined with something unknown (e.g. no process snapshot: other processes' memory)."""


def gpu_context(gpus: pd.DataFrame, apps: pd.DataFrame | None, vllm_pids: Iterable[int]) -> pd.DataFrame:
    """Per GPU (:data:`CONTEXT_COLUMNS`): name, driver and memory of processes not in ``vllm_pids`` [bytes]."""
    known = {int(pid) for pid in vllm_pids}
    _check_apps_on_known_gpus(gpus, apps)
    processes = [] if apps is None else _records(apps, ("gpu_uuid", "pid", "used_memory_bytes"))
    rows = []
    for gpu in sorted(_records(gpus, CONTEXT_COLUMNS[:4]), key=lambda gpu: gpu["gpu_index"]):
        used = [  # <NA> if one process on the GPU is unreported
            process["used_memory_bytes"]
            for process in processes
            if process["gpu_uuid"] == gpu["gpu_uuid"]
            and (pd.isna(process["pid"]) or int(process["pid"]) not in known)
        ]
        other = pd.NA if apps is None or any(pd.isna(value) for value in used) else int(sum(used))
        rows.append([gpu.get(column) for column in CONTEXT_COLUMNS[:4]] + [other])
    return pd.DataFrame(rows, columns=CONTEXT_COLUMNS).astype({"other_process_bytes": "Int64"})


def gpu_index_by_pid(gpus: pd.DataFrame, apps: pd.DataFrame | None) -> dict[int, int]:
    """Which GPU index each process runs on; a process on several GPUs is refused."""
    if apps is None:
        return {}
    _check_apps_on_known_gpus(gpus, apps)
    index_of_uuid = dict(zip(gpus["gpu_uuid"], gpus["gpu_index"]))
    mapping: dict[int, int] = {}
    for app in _records(apps, ("gpu_uuid", "pid", "source", "line")):
        index = int(index_of_uuid[app["gpu_uuid"]])
        if mapping.setdefault(int(app["pid"]), index) != index:
            raise NvidiaSmiError(
                f"{app['source']}, line {app['line']}: pid {app['pid']} runs on GPUs {mapping[int(app['pid'])]} "
                f"and {index}; a vLLM rank must own one GPU"
            )
    return mapping


def read_nvidia_smi_snapshots(paths: Iterable[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """``(gpus, apps)`` of the snapshots among ``paths`` (``apps`` None without a process snapshot)."""
    frames: dict[str, pd.DataFrame] = {}
    for path in paths:  # a DCGM exporter scrape is a GPU snapshot (kvplan.io.gpu_snapshot)
        frame, metadata = read_gpu_snapshot(path)
        kind = metadata.kind
        if kind in frames:
            query = "gpu" if kind == "gpus" else "compute-apps"
            raise NvidiaSmiError(
                f"{path}: a second --query-{query} snapshot (the first is {_source(frames[kind])}): "
                "give one of each kind, taken after warm-up of the same boot"
            )
        frames[kind] = frame
    if "gpus" not in frames:
        raise NvidiaSmiError(
            "an nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,memory.used,memory.free "
            f"snapshot is needed; got only {', '.join(map(str, paths)) or 'nothing'}"
        )
    return frames["gpus"], frames.get("apps")


def gpu_index_by_rank(ledger: pd.DataFrame, gpus: pd.DataFrame, apps: pd.DataFrame | None) -> dict[int, int]:
    """Which GPU each ledger rank runs on: its pid's, else GPU index = rank (another machine's: refused)."""
    known = {int(index) for index in gpus["gpu_index"]}
    by_pid = gpu_index_by_pid(gpus, apps)
    ledger_pids = {int(pid) for pid in ledger["pid"].dropna()} if "pid" in ledger else set()
    if by_pid and ledger_pids and not ledger_pids & set(by_pid):
        sources = ", ".join(sorted({str(source) for source in apps["source"]}))
        raise NvidiaSmiError(
            f"{sources}: the process snapshot shows none of the logged vLLM pids "
            f"({', '.join(map(str, sorted(ledger_pids)))}): it was taken at another time or on another "
            "machine"
        )
    pids_of: dict[int, set[int]] = {}
    ranks = ledger["rank"].tolist()
    for rank, pid in zip(ranks, ledger["pid"].tolist() if "pid" in ledger else [pd.NA] * len(ranks)):
        if not pd.isna(rank):
            pids_of.setdefault(int(rank), set()).update(() if pd.isna(pid) else (int(pid),))
    mapping, placed_by_pid = {}, False
    for rank in sorted(pids_of):
        found = {by_pid[pid] for pid in pids_of[rank] if pid in by_pid}
        placed_by_pid = placed_by_pid or len(found) == 1
        mapping[rank] = found.pop() if len(found) == 1 else rank
    mapping = {rank: index for rank, index in mapping.items() if index in known or not placed_by_pid}
    snapshot = {int(gpu["gpu_index"]): gpu for gpu in _records(gpus, GPU_CHECKED)}
    for row in _records(ledger, ROW_CHECKED):  # each GPU's memory.total fits its ranks' total_bytes
        index = None if pd.isna(row.get("rank")) else mapping.get(int(row["rank"]))
        if index in snapshot:
            _check_total_bytes(row, snapshot[index], index)
    missing = [rank for rank, index in mapping.items() if index not in known]
    if missing:
        raise NvidiaSmiError(
            f"{_source(gpus)}: the snapshot lists {len(known)} GPU(s) "
            f"(index {', '.join(map(str, sorted(known)))}), none for rank(s) {', '.join(map(str, missing))} "
            f"of the {len(mapping)} logged: a snapshot of another machine? Add the "
            "--query-compute-apps snapshot taken with it to place the ranks by pid"
        )
    return mapping


def join_nvidia_smi(
    ledger: pd.DataFrame,
    gpus: pd.DataFrame,
    apps: pd.DataFrame,
    gpu_index_by_rank: Mapping[int, int] | None = None,
) -> tuple[pd.DataFrame, ReadMetadata]:
    """A copy of ``ledger`` with ``gpu_name``, ``driver_version`` and ``other_process_bytes`` filled in: a
    row's GPU is its pid's in ``apps``, else ``gpu_index_by_rank[rank]``; conflicts are refused.

    >>> gpus = read_nvidia_smi_csv("0, GPU-0a1b, NVIDIA H100 80GB HBM3, 580.95.05, 81559, 3072, 78017")[0]
    >>> apps = read_nvidia_smi_csv("GPU-0a1b, 7, VLLM::Worker_TP0, 2048\\nGPU-0a1b, 9, python3, 1024")[0]
    >>> ledger = pd.DataFrame({"source": ["boot.log"], "rank": [0], "pid": [7]})
    >>> row = join_nvidia_smi(ledger, gpus, apps)[0].iloc[0]
    >>> row["gpu_name"], int(row["other_process_bytes"])
    ('NVIDIA H100 80GB HBM3', 1073741824)
    """
    joined = ledger.assign(**{column: pd.NA for column in JOINED_COLUMNS if column not in ledger.columns})
    vllm_pids = {int(pid) for pid in joined["pid"].dropna()} if "pid" in joined.columns else set()
    context = {
        int(gpu["gpu_index"]): gpu for gpu in _records(gpu_context(gpus, apps, vllm_pids), CONTEXT_COLUMNS)
    }
    snapshot = {int(gpu["gpu_index"]): gpu for gpu in _records(gpus, GPU_CHECKED)}
    by_pid = gpu_index_by_pid(gpus, apps)
    values = {column: joined[column].tolist() for column in JOINED_COLUMNS}
    for position, row in enumerate(_records(joined, (*ROW_CHECKED, *JOINED_COLUMNS))):  # no pandas per row
        index = _row_gpu_index(row, by_pid, gpu_index_by_rank, context)
        if index is None:
            continue
        _check_total_bytes(row, snapshot[index], index)
        gpu = context[index]
        for column in ("gpu_name", "driver_version"):
            current = row[column]
            if not pd.isna(current) and str(current) != str(gpu[column]):
                raise NvidiaSmiError(
                    f"{_where(row)}: the ledger says {column} {current!r}, the nvidia-smi snapshot says "
                    f"{gpu[column]!r} for GPU {index}; a snapshot of another machine?"
                )
        for column in JOINED_COLUMNS:
            values[column][position] = gpu[column]
    for column in ("gpu_name", "driver_version"):
        joined[column] = pd.array(values[column], dtype=joined[column].dtype)
    joined["other_process_bytes"] = pd.array(values["other_process_bytes"], dtype="Int64")
    frames = [frame for frame in (gpus, apps) if frame is not None]
    sources = tuple(dict.fromkeys(str(source) for frame in frames for source in frame["source"]))
    if apps is not None:
        return joined, ReadMetadata(sources=sources)
    note = Note(
        f"{_source(gpus)}: no nvidia-smi --query-compute-apps snapshot, so the memory of other processes on "
        "each GPU is unknown (other_process_bytes left empty); add one taken with it: nvidia-smi "
        "--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv",
        code="nvidia-smi-no-process-snapshot",
        file=_source(gpus),
    )
    warnings.warn(NvidiaSmiWarning(note), stacklevel=2)
    return joined, ReadMetadata(sources=sources, warnings=(note,))


def join_snapshots(
    ledger: pd.DataFrame, paths: Iterable[str | Path], warn: bool = True
) -> tuple[pd.DataFrame, dict[int, int], ReadMetadata]:
    """The ledger joined with the snapshots among ``paths``, each rank's free memory [bytes], the metadata
    (``warn=False``: its warnings not also raised as :class:`NvidiaSmiWarning`).

    >>> from kvplan import DATA_DIR
    >>> from kvplan.io import read_vllm_logs
    >>> folder = DATA_DIR / "boots" / "four-rank"
    >>> ledger, _ = read_vllm_logs(folder / "boot.log")
    >>> joined, free, metadata = join_snapshots(ledger, [folder / "nvidia-smi-gpu.csv"], warn=False)
    >>> joined["gpu_name"].unique().tolist(), free[2] // MiB, metadata.warnings[0].code
    (['NVIDIA H100 80GB HBM3'], 2314, 'nvidia-smi-no-process-snapshot')
    """
    return join_gpu_frames(ledger, *read_nvidia_smi_snapshots(list(paths)), warn=warn)


def join_gpu_frames(
    ledger: pd.DataFrame, gpus: pd.DataFrame, apps: pd.DataFrame | None, warn: bool = True
) -> tuple[pd.DataFrame, dict[int, int], ReadMetadata]:
    """:func:`join_snapshots` of snapshots already read (:func:`read_nvidia_smi_snapshots`)."""
    by_rank = gpu_index_by_rank(ledger, gpus, apps)
    with warnings.catch_warnings():
        if not warn:
            warnings.simplefilter("ignore", NvidiaSmiWarning)
        joined, metadata = join_nvidia_smi(ledger, gpus, apps, gpu_index_by_rank=by_rank)
    free = dict(zip(gpus["gpu_index"].astype(int), gpus["memory_free_bytes"]))
    return joined, {rank: int(free[i]) for rank, i in by_rank.items() if not pd.isna(free[i])}, metadata


def total_bytes_match(logged_total_bytes: int, smi_total_bytes: int) -> bool:
    """Whether vLLM's logged total [bytes] can be the GPU of nvidia-smi's ``memory.total`` (less by the driver's
    reservation, give or take rounding).

    >>> total_bytes_match(85_029_615_043, 81_559 * MiB)  # H100: 79.19 GiB logged, 468 MiB reserved
    True
    >>> total_bytes_match(85_029_615_043, 97_887 * MiB)  # an RTX PRO 6000: 16.4 GiB more
    False
    """
    allowed_bytes = driver_reserved_max_bytes(smi_total_bytes) + TOTAL_ROUNDING_BYTES
    return -TOTAL_ROUNDING_BYTES <= smi_total_bytes - logged_total_bytes <= allowed_bytes


def _check_total_bytes(row, gpu, index: int) -> None:
    logged, smi = row.get("total_bytes"), gpu["memory_total_bytes"]
    if pd.isna(logged) or pd.isna(smi) or total_bytes_match(int(logged), int(smi)):
        return
    raise NvidiaSmiError(
        f"{gpu['source']}, line {gpu['line']}: GPU {index} has memory.total {int(smi) // MiB:,} MiB "
        f"({format_size(int(smi))}), but {_where(row)} logged {format_size(int(logged))} total GPU memory; "
        f"the same GPU's totals differ by at most the driver's reservation "
        f"(here up to {format_size(driver_reserved_max_bytes(int(smi)))}) and rounding: a snapshot of "
        "another machine?"
    )


def _source(snapshot: pd.DataFrame) -> str:
    return str(snapshot["source"].iloc[0]) if len(snapshot) else "<snapshot>"


def _records(frame: pd.DataFrame, columns: Iterable[str]) -> list[dict]:
    """The rows of ``frame`` as dicts of ``columns`` (absent ones left out)."""
    present = [column for column in columns if column in frame.columns]
    return [dict(zip(present, values)) for values in zip(*(frame[column].tolist() for column in present))]


def _row_gpu_index(row, by_pid, gpu_index_by_rank, known_indexes) -> int | None:
    pid, rank, from_rank = row.get("pid"), row.get("rank"), None
    from_pid = None if pd.isna(pid) else by_pid.get(int(pid))
    if gpu_index_by_rank is not None and not pd.isna(rank) and int(rank) in gpu_index_by_rank:
        from_rank = int(gpu_index_by_rank[int(rank)])
        if from_rank not in known_indexes:
            raise NvidiaSmiError(
                f"{_where(row)}: gpu_index_by_rank maps it to GPU {from_rank}, not in the snapshot"
            )
    if from_pid is not None and from_rank is not None and from_pid != from_rank:
        raise NvidiaSmiError(
            f"{_where(row)}: pid {int(pid)} runs on GPU {from_pid} in the snapshot, "
            f"but gpu_index_by_rank says GPU {from_rank}"
        )
    return from_pid if from_pid is not None else from_rank


def _where(row) -> str:
    source, rank = row.get("source", "ledger"), row.get("rank")
    return f"{source}, rank {rank}" if not pd.isna(rank) else str(source)


def _check_apps_on_known_gpus(gpus: pd.DataFrame, apps: pd.DataFrame | None) -> None:
    if apps is None:
        return
    unknown = apps[~apps["gpu_uuid"].isin(set(gpus["gpu_uuid"]))]
    if not unknown.empty:
        first = unknown.iloc[0]
        raise NvidiaSmiError(
            f"{first['source']}, line {first['line']}: process {first['pid']} runs on {first['gpu_uuid']}, "
            "which the --query-gpu snapshot does not list; were both taken on the same machine?"
        )
