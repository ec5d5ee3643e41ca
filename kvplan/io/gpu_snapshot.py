"""One GPU snapshot as int bytes: an ``nvidia-smi`` CSV (with or without header and units; ``[N/A]`` is ``<NA>``,
never 0) or a DCGM exporter scrape read as the ``--query-gpu`` frame (:func:`read_gpu_snapshot`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from kvplan.io.metadata import ReadMetadata
from kvplan.units import MiB, parse_size

GPU_COLUMNS = ["gpu_index", "gpu_uuid", "gpu_name", "driver_version", "memory_total_bytes", "memory_used_bytes",
               "memory_free_bytes"]  # fmt: skip
APP_COLUMNS = ["gpu_uuid", "pid", "process_name", "used_memory_bytes"]
# Header field (units stripped) -> column, per kind. ``used_memory`` prints as ``used_gpu_memory``.
_GPU_FIELDS = ["index", "uuid", "name", "driver_version", "memory.total", "memory.used", "memory.free"]
_APP_FIELDS = ["gpu_uuid", "pid", "process_name", "used_gpu_memory"]
NVIDIA_SMI_HEADERS = {
    "gpus": dict(zip(_GPU_FIELDS, GPU_COLUMNS)),
    "apps": {**dict(zip(_APP_FIELDS, APP_COLUMNS)), "used_memory": "used_memory_bytes"},
}
_COLUMNS = {"gpus": GPU_COLUMNS, "apps": APP_COLUMNS}
_DTYPES = dict.fromkeys(("gpu_index", "pid", "line"), np.dtype(np.int64)) | dict.fromkeys(
    ("memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "used_memory_bytes"), pd.Int64Dtype()
)
_NOT_AVAILABLE = {"[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]"}


class NvidiaSmiError(ValueError):
    """An nvidia-smi snapshot that cannot be read or joined; the message names the file and line."""


def read_nvidia_smi_csv(
    path_or_text: str | Path, kind: str | None = None
) -> tuple[pd.DataFrame, ReadMetadata]:
    """A snapshot (a path, or the CSV text) as :data:`GPU_COLUMNS` or :data:`APP_COLUMNS` plus ``source`` and
    ``line``; ``kind`` ("gpus", "apps") detected unless given.

    >>> apps, metadata = read_nvidia_smi_csv("GPU-0a1b, 4242, python3, 1024 MiB")
    >>> metadata.kind, int(apps.loc[0, "pid"]), int(apps.loc[0, "used_memory_bytes"])
    ('apps', 4242, 1073741824)
    """
    if kind not in (None, "gpus", "apps"):
        raise NvidiaSmiError(f"kind must be 'gpus', 'apps' or None, not {kind!r}")
    source, text = "<text>", str(path_or_text)
    if isinstance(path_or_text, Path) or ("\n" not in path_or_text and "," not in path_or_text):
        source = str(Path(path_or_text))
        try:
            text = Path(path_or_text).read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff")
        except OSError as exc:
            raise NvidiaSmiError(f"{source}: cannot read nvidia-smi snapshot ({exc.strerror})") from None
    rows = [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not rows:
        if kind is None:
            raise NvidiaSmiError(
                f"{source}: empty nvidia-smi snapshot; pass kind='apps' if it is a header-less "
                "--query-compute-apps snapshot with no process running"
            )
        return _frame([], kind), ReadMetadata(sources=(source,), kind=kind)
    number, first = rows[0]
    header = _header(first, source, number)
    detected, fields = header or _headerless_kind(first, source, number)
    rows = rows[1:] if header else rows
    if kind is not None and kind != detected:
        raise NvidiaSmiError(f"{source}, line {number}: expected a {kind!r} snapshot, found {detected!r}")
    records = [_parse_row(line, fields, detected, source, line_no) for line_no, line in rows]
    return _frame(records, detected), ReadMetadata(sources=(source,), kind=detected)


def _split(line: str) -> list[str]:
    return [part.strip() for part in line.split(",")]


def _header(line: str, source: str, number: int) -> tuple[str, list[str | None]] | None:
    """The kind and fields of a header (names with units stripped), None when the line is data."""
    names = [part.split("[")[0].strip().lower() for part in _split(line)]
    if names[0] not in {*NVIDIA_SMI_HEADERS["gpus"], *NVIDIA_SMI_HEADERS["apps"]}:
        return None
    for kind, mapping in NVIDIA_SMI_HEADERS.items():
        fields = [mapping.get(name) for name in names]
        if set(_COLUMNS[kind]) <= set(fields) - {None}:
            return kind, fields
    raise NvidiaSmiError(
        f"{source}, line {number}: header {', '.join(names)!r} is neither "
        "--query-gpu=index,uuid,name,driver_version,memory.total,memory.used,memory.free nor "
        "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"
    )


def _headerless_kind(line: str, source: str, number: int) -> tuple[str, list[str | None]]:
    first, count = _split(line)[0], len(_split(line))
    if count == len(GPU_COLUMNS) and first.isdigit():
        return "gpus", list(GPU_COLUMNS)
    if count >= len(APP_COLUMNS) and first.upper().startswith(("GPU-", "MIG-")):
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
    record |= {field: _value(field, value, source, number) for field, value in zip(fields, parts) if field}
    if kind == "gpus":
        _check_gpu_memory(record, source, number)
    return record


def _value(field: str, value: str, source: str, number: int):
    memory = field.endswith("_bytes")
    if memory and value.lower() in _NOT_AVAILABLE:
        return pd.NA
    if not memory and field not in ("gpu_index", "pid"):
        return value
    try:  # nvidia-smi reports memory in MiB; ``nounits`` drops the unit but not the scale
        if memory and (size := parse_size(value if value.lower().endswith("ib") else f"{value} MiB")) >= 0:
            return size
        if not memory and value.isdigit():
            return int(value)
    except ValueError:
        pass
    unit = " (MiB, e.g. '81559 MiB' or '81559')" if memory else " (a whole number)"
    raise NvidiaSmiError(f"{source}, line {number}: {field} {value!r} is not a valid value{unit}")


def _frame(records: list[dict], kind: str) -> pd.DataFrame:
    columns = [*_COLUMNS[kind], "source", "line"]
    data: dict = {column: [record.get(column) for record in records] for column in columns}
    for column in _DTYPES.keys() & set(columns):  # at its dtype (an object frame cast is ~5x slower)
        data[column] = pd.array(data[column], dtype=_DTYPES[column])
    return pd.DataFrame(data, columns=columns)


# used, free and total are each printed in whole MiB: used + free may pass total by their rounding
MEMORY_ROUNDING_BYTES = 2 * MiB


def _check_gpu_memory(record: dict, source: str, number: int) -> None:
    """Refuse a row whose free or used memory nvidia-smi cannot print with that total."""
    total, used, free = (record.get(f"memory_{name}_bytes", pd.NA) for name in ("total", "used", "free"))
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


DCGM_FIELDS = {f"DCGM_FI_DEV_FB_{field.upper()}": field for field in ("free", "used", "total", "reserved")}
_DRIVER_LABELS = ("DCGM_FI_DRIVER_VERSION", "driver_version")
FB_SELECTOR = '{__name__=~"DCGM_FI_DEV_FB_(FREE|USED|TOTAL|RESERVED)"}'  # every GPU's framebuffer series
_FB_LINE = re.compile(r"^\s*DCGM_FI_DEV_FB_(?:FREE|USED|TOTAL|RESERVED)\b")
#: No GPU's framebuffer is a PiB: a DCGM value above it is not memory (and would not fit int64 bytes far above)
MAX_FB_MIB = 1 << 30


def _check_dcgm_memory(source: str, uuid: str, gpu: dict, total: float) -> None:
    """Refuse a GPU whose free, used, or free + used exceeds its total (``FREE + USED + RESERVED``, issue 28)."""
    mib, lines = gpu["mib"], gpu["lines"]
    for field in ("free", "used"):
        if mib[field] > total:
            raise NvidiaSmiError(
                f"{source}, line {lines[field]}: GPU {uuid} has DCGM_FI_DEV_FB_{field.upper()} {mib[field]:,.0f} "
                f"MiB, more than its total {total:,.0f} MiB: not a scrape DCGM exports"
            )
    if (mib["free"] + mib["used"]) * MiB > total * MiB + MEMORY_ROUNDING_BYTES:
        raise NvidiaSmiError(
            f"{source}, line {lines['free']}: GPU {uuid} has DCGM_FI_DEV_FB_FREE + _USED = "
            f"{mib['free'] + mib['used']:,.0f} MiB, more than its total {total:,.0f} MiB: not a scrape DCGM exports"
        )


def _gpus(path: str | Path, hostname: str | None) -> dict[str, dict]:
    """Per GPU UUID: its labels, each field's MiB and line, and its first line."""
    from prometheus_client.parser import text_string_to_metric_families  # 2 MiB: not for nvidia-smi CSVs

    source, hosts = str(path), set()
    gpus: dict[str, dict] = {}
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not _FB_LINE.match(line):
                continue
            try:
                [family] = text_string_to_metric_families(line.strip())
                sample, labels = family.samples[0], family.samples[0].labels
            except (ValueError, IndexError):
                raise NvidiaSmiError(
                    f"{source}, line {number}: expected a DCGM exporter sample, got {line.strip()[:80]!r}"
                ) from None
            host = labels.get("Hostname", "")
            if hostname is not None and host != hostname:
                continue
            hosts.add(host)
            if "UUID" not in labels or "gpu" not in labels or not labels["gpu"].isdigit():
                raise NvidiaSmiError(
                    f"{source}, line {number}: a DCGM sample without its gpu and UUID labels"
                )
            gpu = gpus.setdefault(labels["UUID"], {"labels": labels, "line": number, "mib": {}, "lines": {}})
            value = float(sample.value)  # MiB, from 0 to MAX_FB_MIB (issue 28)
            if not (math.isfinite(value) and 0 <= value <= MAX_FB_MIB):
                raise NvidiaSmiError(
                    f"{source}, line {number}: {sample.name} {sample.value!r} is not a framebuffer size DCGM "
                    f"reports (MiB, from 0 to {MAX_FB_MIB:,})"
                )
            field = DCGM_FIELDS[sample.name]
            gpu["mib"][field], gpu["lines"][field] = value, number
    if len(hosts) > 1:
        raise NvidiaSmiError(
            f"{source}: a DCGM scrape of {len(hosts)} hosts ({', '.join(sorted(hosts)[:3])}…): give one host's"
        )
    return gpus


def read_dcgm_scrape(path: str | Path, hostname: str | None = None) -> tuple[pd.DataFrame, ReadMetadata]:
    """One host's GPUs from a DCGM exporter scrape, as nvidia-smi's ``--query-gpu`` snapshot frame."""
    source, records = str(path), []
    for uuid, gpu in _gpus(path, hostname).items():
        mib, labels = gpu["mib"], gpu["labels"]
        total = mib.get("total")
        if total is None and {"free", "used", "reserved"} <= mib.keys():
            total = mib["free"] + mib["used"] + mib["reserved"]
        if "free" not in mib or "used" not in mib or total is None:
            raise NvidiaSmiError(
                f"{source}, line {gpu['line']}: GPU {uuid} needs DCGM_FI_DEV_FB_FREE, DCGM_FI_DEV_FB_USED and "
                "DCGM_FI_DEV_FB_TOTAL (or DCGM_FI_DEV_FB_RESERVED) to be read as an nvidia-smi snapshot"
            )
        _check_dcgm_memory(source, uuid, gpu, total)
        driver = next((labels[k] for k in _DRIVER_LABELS if labels.get(k)), pd.NA)
        values = [int(labels["gpu"]), uuid, labels.get("modelName", pd.NA), driver]
        values += [int(v) * MiB for v in (total, mib["used"], mib["free"])]
        records.append({**dict(zip(GPU_COLUMNS, values)), "source": source, "line": gpu["line"]})
    if not records:
        raise NvidiaSmiError(
            f"{source}: no DCGM_FI_DEV_FB_* sample{'' if hostname is None else ' of ' + hostname}"
        )
    frame = _frame(records, "gpus").sort_values("gpu_index").reset_index(drop=True)
    return frame, ReadMetadata(sources=(source,), kind="gpus")


def read_gpu_snapshot(path: str | Path) -> tuple[pd.DataFrame, ReadMetadata]:
    """An nvidia-smi CSV snapshot, or a DCGM scrape (a ``DCGM_FI_DEV_FB_*`` sample in its first 200 lines)."""
    with open(path, encoding="utf-8", errors="replace") as lines:
        dcgm = any(_FB_LINE.match(line) for _, line in zip(range(200), lines))
    return read_dcgm_scrape(path) if dcgm else read_nvidia_smi_csv(path)


def dcgm_scrapes_at(url: str, at: float) -> dict[str, str]:
    """Per ``Hostname``: Prometheus' DCGM framebuffer samples at ``at`` [Unix s] as an exporter scrape's text."""
    from kvplan.io.load import Sample  # the Prometheus readers only when Prometheus is asked
    from kvplan.io.prometheus import instant_series, sample_line

    lines: dict[str, list[str]] = {}
    for series in instant_series(url, FB_SELECTOR, at):
        name, host = series.labels.get("__name__", ""), series.labels.get("Hostname", "")
        samples = [sample_line(Sample(name, series.labels, t, v)) for t, v in series.points]
        lines.setdefault(host, []).extend(samples)
    return {host: "".join(found) for host, found in sorted(lines.items())}
