"""Read one ``nvidia-smi`` CSV snapshot (GPUs or processes, int bytes): :func:`read_nvidia_smi_csv`.

The two queries, with or without header and units, the kind told by the header or the number of fields::

    nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,memory.used,memory.free --format=csv
    nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv

MiB become ``int`` bytes; ``[N/A]`` and ``[Not Supported]`` become ``<NA>``, never 0. Memory nvidia-smi cannot
print (negative, free or used above the total, used + free above it) is refused with the file and line.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kvplan.io.metadata import ReadMetadata
from kvplan.units import MiB, parse_size

GPU_COLUMNS = [
    "gpu_index",
    "gpu_uuid",
    "gpu_name",
    "driver_version",
    "memory_total_bytes",
    "memory_used_bytes",
    "memory_free_bytes",
]
APP_COLUMNS = ["gpu_uuid", "pid", "process_name", "used_memory_bytes"]
# Header field (units stripped) -> column, per kind. ``used_memory`` prints as ``used_gpu_memory``.
NVIDIA_SMI_HEADERS = {
    "gpus": {
        "index": "gpu_index",
        "uuid": "gpu_uuid",
        "name": "gpu_name",
        "driver_version": "driver_version",
        "memory.total": "memory_total_bytes",
        "memory.used": "memory_used_bytes",
        "memory.free": "memory_free_bytes",
    },
    "apps": {
        "gpu_uuid": "gpu_uuid",
        "pid": "pid",
        "process_name": "process_name",
        "used_gpu_memory": "used_memory_bytes",
        "used_memory": "used_memory_bytes",
    },
}
_COLUMNS = {"gpus": GPU_COLUMNS, "apps": APP_COLUMNS}
_NOT_AVAILABLE = {"[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]"}


class NvidiaSmiError(ValueError):
    """An nvidia-smi snapshot that cannot be read or joined; the message names the file and line."""


def read_nvidia_smi_csv(
    path_or_text: str | Path, kind: str | None = None
) -> tuple[pd.DataFrame, ReadMetadata]:
    """A ``--query-gpu`` or ``--query-compute-apps`` snapshot (a path, or the CSV text) as :data:`GPU_COLUMNS`
    or :data:`APP_COLUMNS` plus ``source`` and ``line``; ``kind`` ("gpus", "apps") detected unless given (an
    empty header-less process snapshot needs it); the metadata's ``kind`` tells which.

    >>> apps, metadata = read_nvidia_smi_csv("GPU-0a1b, 4242, python3, 1024 MiB")
    >>> metadata.kind, int(apps.loc[0, "pid"]), int(apps.loc[0, "used_memory_bytes"])
    ('apps', 4242, 1073741824)
    """
    if kind not in (None, "gpus", "apps"):
        raise NvidiaSmiError(f"kind must be 'gpus', 'apps' or None, not {kind!r}")
    source, text = _source_and_text(path_or_text)
    rows = [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not rows:
        if kind is None:
            raise NvidiaSmiError(
                f"{source}: empty nvidia-smi snapshot; pass kind='apps' if it is a header-less "
                "--query-compute-apps snapshot with no process running"
            )
        return _frame([], kind), ReadMetadata(sources=(source,), kind=kind)
    number, first = rows[0]
    header = _parse_header(first)
    if header is not None:
        detected, fields = _header_kind(header, source, number)
        rows = rows[1:]
    else:
        detected, fields = _headerless_kind(first, source, number)
    if kind is not None and kind != detected:
        raise NvidiaSmiError(f"{source}, line {number}: expected a {kind!r} snapshot, found {detected!r}")
    records = [_parse_row(line, fields, detected, source, line_no) for line_no, line in rows]
    return _frame(records, detected), ReadMetadata(sources=(source,), kind=detected)


def _source_and_text(path_or_text: str | Path) -> tuple[str, str]:
    if isinstance(path_or_text, Path) or ("\n" not in path_or_text and "," not in path_or_text):
        path = Path(path_or_text)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise NvidiaSmiError(f"{path}: cannot read nvidia-smi snapshot ({exc.strerror})") from None
        return str(path), data.decode("utf-8", errors="replace").lstrip("\ufeff")
    return "<text>", path_or_text


def _split(line: str) -> list[str]:
    return [part.strip() for part in line.split(",")]


def _parse_header(line: str) -> list[str] | None:
    """Header names with units stripped, or None when the line is data (its first field is not a name)."""
    names = [part.split("[")[0].strip().lower() for part in _split(line)]
    known = set(NVIDIA_SMI_HEADERS["gpus"]) | set(NVIDIA_SMI_HEADERS["apps"])
    return names if names and names[0] in known else None


def _header_kind(names: list[str], source: str, number: int) -> tuple[str, list[str]]:
    for kind, mapping in NVIDIA_SMI_HEADERS.items():
        fields = [mapping.get(name) for name in names]
        if set(_COLUMNS[kind]) <= set(fields) - {None}:
            return kind, fields
    raise NvidiaSmiError(
        f"{source}, line {number}: header {', '.join(names)!r} is neither "
        "--query-gpu=index,uuid,name,driver_version,memory.total,memory.used,memory.free nor "
        "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"
    )


def _headerless_kind(line: str, source: str, number: int) -> tuple[str, list[str]]:
    count = len(_split(line))
    if count == len(GPU_COLUMNS) and _split(line)[0].isdigit():
        return "gpus", list(GPU_COLUMNS)
    if count >= len(APP_COLUMNS) and _split(line)[0].upper().startswith(("GPU-", "MIG-")):
        return "apps", list(APP_COLUMNS)
    raise NvidiaSmiError(
        f"{source}, line {number}: expected an nvidia-smi CSV header, a --query-gpu row of 7 fields "
        f"starting with the GPU index, or a --query-compute-apps row of 4 fields starting with the GPU "
        f"UUID; got {count} fields: {line[:80]!r}"
    )


def _parse_row(line: str, fields: list[str | None], kind: str, source: str, number: int) -> dict:
    parts = _split(line)
    extra = len(parts) - len(fields)
    if extra > 0 and "process_name" in fields:
        # A process name with commas in it: give the surplus fields back to the name.
        at = fields.index("process_name")
        parts = [*parts[:at], ", ".join(parts[at : at + extra + 1]), *parts[at + extra + 1 :]]
    if len(parts) != len(fields):
        raise NvidiaSmiError(
            f"{source}, line {number}: expected {len(fields)} comma-separated fields, got {len(parts)}: "
            f"{line[:80]!r}"
        )
    record = {"source": source, "line": number}
    for field, value in zip(fields, parts):
        if field is not None:
            record[field] = _value(field, value, source, number)
    if kind == "gpus":
        _check_gpu_memory(record, source, number)
    return record


def _value(field: str, value: str, source: str, number: int):
    if field.endswith("_bytes"):
        if value.lower() in _NOT_AVAILABLE:
            return pd.NA
        # nvidia-smi reports memory in MiB; ``nounits`` drops the unit but not the scale.
        text = value if value.lower().endswith("ib") else f"{value} MiB"
        try:
            size = parse_size(text)
        except ValueError:
            return _bad(field, value, source, number)
        return size if size >= 0 else _bad(field, value, source, number)
    if field in ("gpu_index", "pid"):
        if not value.isdigit():
            return _bad(field, value, source, number)
        return int(value)
    return value


def _bad(field: str, value: str, source: str, number: int):
    unit = " (MiB, e.g. '81559 MiB' or '81559')" if field.endswith("_bytes") else " (a whole number)"
    raise NvidiaSmiError(f"{source}, line {number}: {field} {value!r} is not a valid value{unit}")


def _frame(records: list[dict], kind: str) -> pd.DataFrame:
    columns = [*_COLUMNS[kind], "source", "line"]
    frame = pd.DataFrame(records, columns=columns)
    for column in columns:
        if column.endswith("_bytes"):
            frame[column] = frame[column].astype("Int64")
        elif column in ("gpu_index", "pid", "line"):
            frame[column] = frame[column].astype("int64")
    return frame


# used, free and total are each printed in whole MiB: used + free may pass total by their rounding
MEMORY_ROUNDING_BYTES = 2 * MiB


def _check_gpu_memory(record: dict, source: str, number: int) -> None:
    """Refuse a ``--query-gpu`` row whose free or used memory nvidia-smi cannot print with that total."""
    total, used, free = (record.get(f"memory_{name}_bytes") for name in ("total", "used", "free"))
    if pd.isna(total):
        return
    for name, value in (("free", free), ("used", used)):
        if not pd.isna(value) and value > total:
            raise NvidiaSmiError(
                f"{source}, line {number}: memory.{name} {value // MiB:,} MiB is more than memory.total "
                f"{total // MiB:,} MiB: not a snapshot nvidia-smi prints"
            )
    if not pd.isna(used) and not pd.isna(free) and used + free > total + MEMORY_ROUNDING_BYTES:
        raise NvidiaSmiError(
            f"{source}, line {number}: memory.used + memory.free = {(used + free) // MiB:,} MiB is more "
            f"than memory.total {total // MiB:,} MiB (nvidia-smi's used is total − free − reserved): not a "
            "snapshot nvidia-smi prints"
        )
