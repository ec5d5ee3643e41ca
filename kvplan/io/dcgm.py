"""GPU evidence from NVIDIA's DCGM exporter, read as an nvidia-smi ``--query-gpu`` snapshot.

A saved exporter scrape, or Prometheus' DCGM series at a time (:func:`dcgm_scrapes_at`), is read into the frame
:func:`kvplan.io.nvidia_smi_csv.read_nvidia_smi_csv` gives (int bytes), one GPU per ``UUID``, labelled ``gpu``,
``modelName``, ``Hostname`` and the driver where the exporter labels it::

    DCGM_FI_DEV_FB_FREE{gpu="2",UUID="GPU-2e7b…",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"} 2314

Free and used are ``DCGM_FI_DEV_FB_FREE``/``_USED`` [MiB]; the total ``_TOTAL``, else free + used + ``_RESERVED``.
DCGM tells no per-process memory: other processes' memory stays unknown.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from kvplan.io.metadata import ReadMetadata
from kvplan.io.nvidia_smi_csv import GPU_COLUMNS, NvidiaSmiError, read_nvidia_smi_csv
from kvplan.units import MiB

DCGM_FIELDS = {
    "DCGM_FI_DEV_FB_FREE": "free",
    "DCGM_FI_DEV_FB_USED": "used",
    "DCGM_FI_DEV_FB_TOTAL": "total",
    "DCGM_FI_DEV_FB_RESERVED": "reserved",
}
_DRIVER_LABELS = ("DCGM_FI_DRIVER_VERSION", "driver_version")
FB_SELECTOR = '{__name__=~"DCGM_FI_DEV_FB_(FREE|USED|TOTAL|RESERVED)"}'  # every GPU's framebuffer series
_FB_LINE = re.compile(r"^\s*DCGM_FI_DEV_FB_(?:FREE|USED|TOTAL|RESERVED)\b")


def is_dcgm_file(path: str | Path) -> bool:
    """Whether ``path`` holds a DCGM scrape (a ``DCGM_FI_DEV_FB_*`` sample in its first 200 lines)."""
    with open(path, encoding="utf-8", errors="replace") as lines:
        return any(_FB_LINE.match(line) for _, line in zip(range(200), lines))


def _sample(line: str, source: str, number: int):
    try:
        [family] = text_string_to_metric_families(line)
        return family.samples[0]
    except (ValueError, IndexError):
        raise NvidiaSmiError(
            f"{source}, line {number}: expected a DCGM exporter sample, got {line[:80]!r}"
        ) from None


def _gpus(path: str | Path, hostname: str | None) -> dict[str, dict]:
    """Per GPU UUID: its labels, the MiB of each field, and the line of its first sample."""
    source, hosts = str(path), set()
    gpus: dict[str, dict] = {}
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not _FB_LINE.match(line):
                continue
            sample = _sample(line.strip(), source, number)
            labels = sample.labels
            host = labels.get("Hostname", "")
            if hostname is not None and host != hostname:
                continue
            hosts.add(host)
            if "UUID" not in labels or "gpu" not in labels or not labels["gpu"].isdigit():
                raise NvidiaSmiError(
                    f"{source}, line {number}: a DCGM sample without its gpu and UUID labels"
                )
            gpu = gpus.setdefault(labels["UUID"], {"labels": labels, "line": number, "mib": {}})
            gpu["mib"][DCGM_FIELDS[sample.name]] = float(sample.value)
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
        driver = next((labels[k] for k in _DRIVER_LABELS if labels.get(k)), pd.NA)
        values = [int(labels["gpu"]), uuid, labels.get("modelName", pd.NA), driver]
        values += [int(v) * MiB for v in (total, mib["used"], mib["free"])]
        records.append({**dict(zip(GPU_COLUMNS, values)), "source": source, "line": gpu["line"]})
    if not records:
        raise NvidiaSmiError(
            f"{source}: no DCGM_FI_DEV_FB_* sample{'' if hostname is None else ' of ' + hostname}"
        )
    frame = pd.DataFrame(records, columns=[*GPU_COLUMNS, "source", "line"]).sort_values("gpu_index")
    for column in ("memory_total_bytes", "memory_used_bytes", "memory_free_bytes"):
        frame[column] = frame[column].astype("Int64")
    frame = frame.astype({"gpu_index": "int64", "line": "int64"}).reset_index(drop=True)
    return frame, ReadMetadata(sources=(source,), kind="gpus")


def read_gpu_snapshot(path: str | Path) -> tuple[pd.DataFrame, ReadMetadata]:
    """An nvidia-smi CSV snapshot or a DCGM scrape, as :func:`~kvplan.io.nvidia_smi_csv.read_nvidia_smi_csv`
    reads the CSV: one reader for every GPU snapshot."""
    return read_dcgm_scrape(path) if is_dcgm_file(path) else read_nvidia_smi_csv(path)


def dcgm_scrapes_at(url: str, at: float) -> dict[str, str]:
    """Per DCGM ``Hostname``: the framebuffer samples Prometheus at ``url`` holds at ``at`` [Unix s], as an
    exporter scrape's text (every label kept, each sample with its time), which :func:`read_dcgm_scrape` reads."""
    from kvplan.io.load import Sample  # the Prometheus readers only when Prometheus is asked
    from kvplan.io.prometheus.api import instant_series
    from kvplan.io.prometheus.vllm import sample_line

    lines: dict[str, list[str]] = {}
    for series in instant_series(url, FB_SELECTOR, at):
        name, host = series.labels.get("__name__", ""), series.labels.get("Hostname", "")
        lines.setdefault(host, []).extend(
            sample_line(Sample(name, series.labels, t, v)) for t, v in series.points
        )
    return {host: "".join(found) for host, found in sorted(lines.items())}


def save_dcgm_at(url: str, at: float, path: str | Path, hostname: str | None = None) -> Path | None:
    """One host's DCGM series in Prometheus at ``at`` [Unix s] written to ``path`` (atomically) as an exporter
    scrape, a GPU snapshot every reader takes; None when Prometheus holds none (of ``hostname``). Series of
    several hosts need ``hostname``."""
    scrapes = dcgm_scrapes_at(url, at)
    if hostname is not None:
        scrapes = {host: text for host, text in scrapes.items() if host == hostname}
    if len(scrapes) > 1:
        raise NvidiaSmiError(
            f"prometheus {url}: DCGM series of {len(scrapes)} hosts at {at:.0f} (Unix s) "
            f"({', '.join(list(scrapes)[:3])}…): choose the launch's host with --gpu-host"
        )
    if not scrapes:
        return None
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(next(iter(scrapes.values())), encoding="utf-8")
    return partial.replace(path)
